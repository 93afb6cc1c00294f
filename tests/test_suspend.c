/* Suspend and resume of a pool (capturepool.h, cpool_pool_suspend and
 * cpool_pool_resume), as a user sees it through the public API:
 *  - KEEP_CONTENTS: every live block (eager allocations small and large,
 *    blocks spanning pages, graph outputs made with cpool_alloc under
 *    capture, cpool_alloc_output and cpool_graphed_call) comes back at its
 *    address with its bytes; graphs captured before the suspend replay after
 *    the resume and, from the same inputs, write the same bytes;
 *  - DISCARD: addresses are kept, bytes are not, and no host memory is held;
 *  - the stats: reserved_bytes and graph_reserved_bytes 0 while suspended,
 *    host_kept_bytes the live bytes only (free, cached and scratch memory is
 *    not copied), host_reserved_bytes kept after the resume until a trim;
 *  - while suspended, allocations, captures holding the pool, launches,
 *    uploads and copies on its memory return CPOOL_ERR_SUSPENDED and change
 *    nothing; frees, records, clears, stats, snapshots, trims and releases
 *    work; a second suspend and a resume of a pool that is not suspended
 *    are no-ops;
 *  - refusals: a capture using the pool, a stream callback, a bad mode,
 *    NULL and dead handles, plain segments (CPOOL_ERR_UNSUPPORTED);
 *  - the last release of a suspended pool (and of its graphs), a free or a
 *    clear while suspended, then a resume;
 *  - suspend and resume on one thread while others launch the pool's graphs,
 *    allocate and free, take snapshots, trim, release graphs and capture
 *    into other pools.
 * Device memory is only touched through memcpy/memset and read_back, so
 * every case runs on CUDA too. Block sizes are multiples of 512 bytes, so a
 * block is exactly its request and the live bytes are allocated_bytes. */
#include "check.h" /* first: its feature macro */
#include "helpers.h"
#include "json.h"

#include <stdbool.h>
#include <unistd.h>

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)

/* ---- patterns ------------------------------------------------------------------------------ */

/* The byte at offset i of the pattern `seed`: no two seeds and no shift of
 * one pattern look alike. */
static unsigned char pattern_byte(uint32_t seed, size_t i) {
    uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    return (unsigned char)x;
}

static void fill_pattern(unsigned char *dst, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) dst[i] = pattern_byte(seed, i);
}

/* Writes the pattern `seed` into n bytes of pool memory and waits. */
static int write_pattern_(cpool_stream *s, void *dst, size_t n, uint32_t seed, const char *file, int line) {
    unsigned char *h = (unsigned char *)malloc(n);
    if (!h) {
        check_report_(file, line, "malloc(%zu) failed", n);
        return 0;
    }
    fill_pattern(h, n, seed);
    cpool_status st = cpool_memcpy_async(s, dst, h, n);
    if (st == CPOOL_OK) st = cpool_stream_synchronize(s);
    free(h);
    if (st != CPOOL_OK)
        check_report_(file, line, "writing %zu bytes at %p: %s (%s)", n, dst, cpool_status_string(st),
                      cpool_last_error());
    return st == CPOOL_OK;
}
#define WRITE_PATTERN(s, dst, n, seed) write_pattern_((s), (dst), (n), (seed), __FILE__, __LINE__)

/* Reads n bytes at src back and compares them with `want`; reports the
 * first byte that differs. */
static int check_equal_(cpool_stream *s, const void *src, const unsigned char *want, size_t n, const char *what,
                        const char *file, int line) {
    unsigned char *h = (unsigned char *)malloc(n);
    int ok = 0;
    if (!h) {
        check_report_(file, line, "malloc(%zu) failed", n);
        return 0;
    }
    memset(h, 0, n);
    cpool_status st = read_back(s, h, src, n);
    if (st != CPOOL_OK) {
        check_report_(file, line, "%s: reading %zu bytes at %p: %s (%s)", what, n, src, cpool_status_string(st),
                      cpool_last_error());
    } else {
        size_t i = 0;
        while (i < n && h[i] == want[i]) i++;
        if (i < n)
            check_report_(file, line, "%s: byte %zu of %zu at %p is 0x%02x, expected 0x%02x", what, i, n, src, h[i],
                          want[i]);
        else
            ok = 1;
    }
    free(h);
    return ok;
}
#define CHECK_EQUAL_BYTES(s, src, want, n) check_equal_((s), (src), (want), (n), #src, __FILE__, __LINE__)

/* Reads n bytes at src back and checks they are the pattern `seed`. */
static int check_pattern_(cpool_stream *s, const void *src, size_t n, uint32_t seed, const char *what, const char *file,
                          int line) {
    unsigned char *want = (unsigned char *)malloc(n);
    if (!want) {
        check_report_(file, line, "malloc(%zu) failed", n);
        return 0;
    }
    fill_pattern(want, n, seed);
    int ok = check_equal_(s, src, want, n, what, file, line);
    free(want);
    return ok;
}
#define CHECK_PATTERN(s, src, n, seed) check_pattern_((s), (src), (n), (seed), #src, __FILE__, __LINE__)

/* ---- stats --------------------------------------------------------------------------------- */

/* Every field, the two of suspend and resume included. */
#define CHECK_ALL_STATS_EQ(a, b)                                                                                       \
    do {                                                                                                               \
        CHECK_STATS_EQ(a, b);                                                                                          \
        CHECK_EQ((a).host_kept_bytes, (b).host_kept_bytes);                                                            \
        CHECK_EQ((a).host_reserved_bytes, (b).host_reserved_bytes);                                                    \
    } while (0)

/* What a suspended pool's stats say whatever the mode: no device memory. */
static void check_suspended_stats_(const cpool_pool *pool, const char *file, int line) {
    cpool_pool_stats st = stats_of(pool);
    if (st.reserved_bytes != 0 || st.graph_reserved_bytes != 0 || st.cached_bytes != 0 || st.segment_count != 0)
        check_report_(file, line,
                      "suspended pool: reserved_bytes %llu, graph_reserved_bytes "
                      "%llu, cached_bytes %llu, "
                      "segment_count %llu; expected 0 each",
                      (unsigned long long)st.reserved_bytes, (unsigned long long)st.graph_reserved_bytes,
                      (unsigned long long)st.cached_bytes, (unsigned long long)st.segment_count);
    if (!cpool_pool_is_suspended(pool)) check_report_(file, line, "cpool_pool_is_suspended is false");
}
#define CHECK_SUSPENDED_STATS(pool) check_suspended_stats_((pool), __FILE__, __LINE__)

static void check_not_capturing(cpool_stream *s) {
    cpool_capture_state state = CPOOL_CAPTURE_ACTIVE;
    CHECK_OK(cpool_capture_status(s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
}

/* CHECK_EQ that says whether it held. */
static int check_eq_ret_(unsigned long long a, unsigned long long b, const char *text, const char *file, int line) {
    if (a == b) return 1;
    check_report_(file, line, "%s: %llu vs %llu", text, a, b);
    return 0;
}
#define CHECK_EQ_RET(a, b)                                                                                             \
    check_eq_ret_((unsigned long long)(a), (unsigned long long)(b), #a " == " #b, __FILE__, __LINE__)

/* ---- eager blocks -------------------------------------------------------------------------- */

/* Sizes of eager blocks: small ones packed in a segment, some spanning
 * 2 MiB pages, a segment of their own (above 10 MiB). */
static const size_t eager_sizes[] = {512,     1024,    4096,           7680, 65536,          512,
                                     131072,  3 * MiB, 3 * MiB + 512,  1536, 5 * MiB + 1024, 12 * MiB,
                                     2 * MiB, 2560,    24 * MiB + 512, 8192, 1 * MiB + 512,  1024};
enum { EAGER = sizeof eager_sizes / sizeof eager_sizes[0], MANY_SMALL = 200 };

typedef struct blocks {
    void *p[EAGER + MANY_SMALL];
    size_t n[EAGER + MANY_SMALL];
    uint32_t seed[EAGER + MANY_SMALL];
    int count;
    uint64_t live_bytes;
} blocks;

/* Allocates and writes every eager block; frees some blocks in between
 * (holes and cached memory that must not travel). */
static int make_blocks(cpool_pool *pool, cpool_stream *s, blocks *b, uint32_t seed) {
    memset(b, 0, sizeof *b);
    void *hole[8];
    int holes = 0;
    for (int i = 0; i < EAGER; i++) {
        if (!CHECK_OK(cpool_alloc(pool, eager_sizes[i], s, &b->p[b->count]))) return 0;
        b->n[b->count] = eager_sizes[i];
        b->seed[b->count] = seed + (uint32_t)b->count;
        if (!WRITE_PATTERN(s, b->p[b->count], b->n[b->count], b->seed[b->count])) return 0;
        b->live_bytes += b->n[b->count];
        b->count++;
        if (i % 3 == 1 && holes < 8) {
            if (!CHECK_OK(cpool_alloc(pool, eager_sizes[i] * 2, s, &hole[holes]))) return 0;
            CHECK_OK(cpool_memset_async(s, hole[holes], 0xcc, eager_sizes[i] * 2));
            holes++;
        }
    }
    for (int i = 0; i < MANY_SMALL; i++) {
        size_t n = 512 * (size_t)(1 + i % 7);
        if (!CHECK_OK(cpool_alloc(pool, n, s, &b->p[b->count]))) return 0;
        b->n[b->count] = n;
        b->seed[b->count] = seed + (uint32_t)b->count;
        if (!WRITE_PATTERN(s, b->p[b->count], n, b->seed[b->count])) return 0;
        b->live_bytes += n;
        b->count++;
    }
    for (int i = 0; i < holes; i++) CHECK_OK(cpool_free(pool, hole[i], s));
    return CHECK_OK(cpool_stream_synchronize(s));
}

static void check_blocks_(cpool_stream *s, const blocks *b, const char *file, int line) {
    int bad = 0;
    for (int i = 0; i < b->count; i++) {
        if (!b->p[i]) continue;
        char what[64];
        snprintf(what, sizeof what, "block %d (%zu bytes)", i, b->n[i]);
        if (!check_pattern_(s, b->p[i], b->n[i], b->seed[i], what, file, line) && ++bad >= 5) {
            check_report_(file, line, "(further blocks not checked)");
            return;
        }
    }
}
#define CHECK_BLOCKS(s, b) check_blocks_((s), (b), __FILE__, __LINE__)

static void free_blocks(cpool_pool *pool, cpool_stream *s, blocks *b) {
    for (int i = 0; i < b->count; i++)
        if (b->p[i]) CHECK_OK(cpool_free(pool, b->p[i], s));
    memset(b, 0, sizeof *b);
}

/* ---- graphs -------------------------------------------------------------------------------- */

/* A graph of the pool: scratch that spans pages, filled with a value and
 * with the eager input, copied into an output made with cpool_alloc under
 * capture (spanning pages) and into a small one made with
 * cpool_alloc_output; a host function counts the replays. */
enum { SCRATCH_BYTES = 3 * MiB + 512, INPUT_OFFSET = 4096, OUT_BYTES = 5 * MiB / 2, SMALL_OUT_BYTES = 1024 };

typedef struct graph_ctx {
    cpool_pool *pool;
    const void *in; /* an eager block, read by every replay */
    size_t in_bytes;
    unsigned char fill;
    void *out, *small_out; /* set by the capture */
    int runs;
} graph_ctx;

static cpool_status body_graph(cpool_stream *s, void *arg) {
    graph_ctx *c = (graph_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, SCRATCH_BYTES, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->fill, SCRATCH_BYTES);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, (char *)scratch + INPUT_OFFSET, c->in, c->in_bytes);
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, OUT_BYTES, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, OUT_BYTES);
    if (st == CPOOL_OK) st = cpool_alloc_output(c->pool, SMALL_OUT_BYTES, s, &c->small_out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->small_out, (char *)scratch + INPUT_OFFSET, SMALL_OUT_BYTES);
    if (st == CPOOL_OK) st = cpool_launch_host(s, cb_inc, &c->runs);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* What a replay writes into out and small_out. */
static void expected_outputs(const graph_ctx *c, uint32_t in_seed, unsigned char *out, unsigned char *small) {
    memset(out, c->fill, OUT_BYTES);
    fill_pattern(out + INPUT_OFFSET, c->in_bytes, in_seed);
    fill_pattern(small, SMALL_OUT_BYTES, in_seed);
}

/* A graphed call: an output the eager run shows outlives the body, and
 * scratch it frees. Every output of every run is noted, so that the eager
 * ones can be freed. */
enum { CALL_OUT_BYTES = 8192, CALL_SCRATCH_BYTES = 1 * MiB, CALL_MAX_RUNS = 4 };
typedef struct call_ctx {
    cpool_pool *pool;
    unsigned char value;
    void *outs[CALL_MAX_RUNS];
    int calls;
} call_ctx;

static cpool_status body_call(cpool_stream *s, void *arg) {
    call_ctx *c = (call_ctx *)arg;
    void *out = NULL, *tmp = NULL;
    cpool_status st = cpool_alloc(c->pool, CALL_OUT_BYTES, s, &out);
    if (st == CPOOL_OK && c->calls < CALL_MAX_RUNS) c->outs[c->calls++] = out;
    if (st == CPOOL_OK) st = cpool_alloc(c->pool, CALL_SCRATCH_BYTES, s, &tmp);
    if (st == CPOOL_OK) st = cpool_memset_async(s, tmp, c->value, CALL_SCRATCH_BYTES);
    if (st == CPOOL_OK) st = cpool_memset_async(s, out, (unsigned char)~c->value, CALL_OUT_BYTES);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, out, tmp, CALL_OUT_BYTES / 2);
    if (tmp && st == CPOOL_OK) st = cpool_free(c->pool, tmp, s);
    return st;
}

static void expected_call_output(const call_ctx *c, unsigned char *want) {
    memset(want, c->value, CALL_OUT_BYTES / 2);
    memset(want + CALL_OUT_BYTES / 2, (unsigned char)~c->value, CALL_OUT_BYTES / 2);
}

/* Launches g on s and waits; the launch counts one replay. */
static int launch_ok_(cpool_graph *g, cpool_stream *s, const char *file, int line) {
    uint64_t replays = cpool_graph_replays(g);
    if (!check_status_(cpool_graph_launch(g, s), CPOOL_OK, "cpool_graph_launch", "CPOOL_OK", file, line)) return 0;
    if (cpool_graph_replays(g) != replays + 1) check_report_(file, line, "replays did not count the launch");
    return check_status_(cpool_stream_synchronize(s), CPOOL_OK, "cpool_stream_synchronize", "CPOOL_OK", file, line);
}
#define LAUNCH_OK(g, s) launch_ok_((g), (s), __FILE__, __LINE__)

/* A pool with eager blocks, one graph of body_graph (launched once) and
 * one graphed call, and the bytes their outputs hold. */
typedef struct world {
    cpool_stream *s;
    cpool_pool *pool;
    blocks b;
    void *in;
    uint32_t in_seed;
    graph_ctx gc;
    call_ctx cc;
    cpool_graph *g, *call;
    unsigned char *want_out, *want_small, *want_call;
} world;

static void world_close_(void *arg) {
    world *w = (world *)arg;
    if (w->pool) {
        if (cpool_pool_is_suspended(w->pool)) CHECK_OK(cpool_pool_resume(w->pool));
        if (w->s) CHECK_OK(cpool_stream_synchronize(w->s));
        cpool_graph_release(w->g);
        cpool_graph_release(w->call);
        if (w->gc.out) CHECK_OK(cpool_free(w->pool, w->gc.out, w->s));
        if (w->gc.small_out) CHECK_OK(cpool_free(w->pool, w->gc.small_out, w->s));
        for (int i = 0; i < w->cc.calls; i++)
            if (w->cc.outs[i]) CHECK_OK(cpool_free(w->pool, w->cc.outs[i], w->s));
        if (w->in) CHECK_OK(cpool_free(w->pool, w->in, w->s));
        free_blocks(w->pool, w->s, &w->b);
        CHECK_OK(cpool_stream_synchronize(w->s));
        CHECK_OK(cpool_pool_trim(w->pool));
        cpool_pool_stats st = stats_of(w->pool);
        CHECK_EQ(st.allocated_bytes, 0);
        CHECK_EQ(st.reserved_bytes, 0);
        CHECK_EQ(st.host_kept_bytes, 0);
        CHECK_EQ(st.host_reserved_bytes, 0);
        cpool_pool_release(w->pool);
    }
    cpool_stream_destroy(w->s);
    free(w->want_out);
    free(w->want_small);
    free(w->want_call);
    memset(w, 0, sizeof *w);
}

/* w must be static: its cleanup runs after the case returned. */
static int world_open(cpool_device *dev, world *w, bool with_blocks) {
    memset(w, 0, sizeof *w);
    check_defer(world_close_, w);
    if (!CHECK_OK(cpool_stream_create(dev, &w->s))) return 0;
    if (!CHECK_OK(cpool_pool_create(dev, NULL, &w->pool))) return 0;
    if (with_blocks && !make_blocks(w->pool, w->s, &w->b, 0x1000)) return 0;
    w->want_out = (unsigned char *)malloc(OUT_BYTES);
    w->want_small = (unsigned char *)malloc(SMALL_OUT_BYTES);
    w->want_call = (unsigned char *)malloc(CALL_OUT_BYTES);
    if (!w->want_out || !w->want_small || !w->want_call) return 0;

    /* The graph's input: an eager block spanning a page boundary of scratch. */
    w->in_seed = 0xabc;
    if (!CHECK_OK(cpool_alloc(w->pool, 2 * MiB, w->s, &w->in))) return 0;
    if (!WRITE_PATTERN(w->s, w->in, 2 * MiB, w->in_seed)) return 0;
    w->gc.pool = w->pool;
    w->gc.in = w->in;
    w->gc.in_bytes = 2 * MiB;
    w->gc.fill = 0x3c;
    if (!CHECK_OK(cpool_capture(w->s, w->pool, CPOOL_CAPTURE_GLOBAL, body_graph, &w->gc, &w->g))) return 0;
    if (!LAUNCH_OK(w->g, w->s)) return 0;
    expected_outputs(&w->gc, w->in_seed, w->want_out, w->want_small);
    if (!CHECK_EQUAL_BYTES(w->s, w->gc.out, w->want_out, OUT_BYTES)) return 0;
    if (!CHECK_EQUAL_BYTES(w->s, w->gc.small_out, w->want_small, SMALL_OUT_BYTES)) return 0;

    w->cc.pool = w->pool;
    w->cc.value = 0x5a;
    if (!CHECK_OK(cpool_graphed_call(w->s, w->pool, CPOOL_CAPTURE_GLOBAL, 1, body_call, &w->cc, &w->call))) return 0;
    if (!CHECK_EQ_RET(w->cc.calls, 2)) return 0;
    /* The eager run's output is the caller's: freed now. */
    CHECK_OK(cpool_free(w->pool, w->cc.outs[0], w->s));
    w->cc.outs[0] = NULL;
    if (!LAUNCH_OK(w->call, w->s)) return 0;
    expected_call_output(&w->cc, w->want_call);
    return CHECK_EQUAL_BYTES(w->s, w->cc.outs[1], w->want_call, CALL_OUT_BYTES);
}

/* The live bytes of a world: its blocks, the input, the graphs' outputs. */
static uint64_t world_live_bytes(const world *w) {
    return w->b.live_bytes + 2 * MiB + OUT_BYTES + SMALL_OUT_BYTES + CALL_OUT_BYTES;
}

/* Overwrites the graphs' outputs, relaunches both, and checks that they
 * write the same bytes as before. */
static void check_graphs_replay_(world *w, const char *file, int line) {
    int failures = __atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST);
    CHECK_OK(cpool_memset_async(w->s, w->gc.out, 0xee, OUT_BYTES));
    CHECK_OK(cpool_memset_async(w->s, w->gc.small_out, 0xee, SMALL_OUT_BYTES));
    CHECK_OK(cpool_memset_async(w->s, w->cc.outs[1], 0xee, CALL_OUT_BYTES));
    int runs = aload(&w->gc.runs);
    LAUNCH_OK(w->g, w->s);
    CHECK_EQ(aload(&w->gc.runs), runs + 1);
    LAUNCH_OK(w->call, w->s);
    CHECK_EQUAL_BYTES(w->s, w->gc.out, w->want_out, OUT_BYTES);
    CHECK_EQUAL_BYTES(w->s, w->gc.small_out, w->want_small, SMALL_OUT_BYTES);
    CHECK_EQUAL_BYTES(w->s, w->cc.outs[1], w->want_call, CALL_OUT_BYTES);
    if (__atomic_load_n(&check_case_failures_, __ATOMIC_SEQ_CST) != failures)
        check_report_(file, line, "(the graphs' replay after the resume, above)");
}
#define CHECK_GRAPHS_REPLAY(w) check_graphs_replay_((w), __FILE__, __LINE__)

/* ---- 1. KEEP_CONTENTS: bytes, addresses and stats ------------------------------------------ */

static void keep_contents_brings_every_live_byte_back(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, true));
    CHECK(!cpool_pool_is_suspended(w.pool));
    cpool_pool_stats before = stats_of(w.pool);
    CHECK_EQ(before.allocated_bytes, world_live_bytes(&w));
    CHECK_EQ(before.host_kept_bytes, 0);
    CHECK_EQ(before.host_reserved_bytes, 0);
    CHECK_GT(before.graph_reserved_bytes, 0);
    CHECK_EQ(before.graph_count, 2);

    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK(cpool_pool_is_suspended(w.pool));
    CHECK_SUSPENDED_STATS(w.pool);
    cpool_pool_stats during = stats_of(w.pool);
    /* Live blocks stay live: their bytes are in host memory. */
    CHECK_EQ(during.allocated_bytes, before.allocated_bytes);
    CHECK_EQ(during.alloc_count, before.alloc_count);
    CHECK_EQ(during.free_count, before.free_count);
    CHECK_EQ(during.graph_count, 2);
    CHECK_EQ(during.host_kept_bytes, world_live_bytes(&w));
    CHECK_GE(during.host_reserved_bytes, during.host_kept_bytes);
    CHECK_EQ(during.reserved_bytes_peak, before.reserved_bytes_peak);

    REQUIRE_OK(cpool_pool_resume(w.pool));
    CHECK(!cpool_pool_is_suspended(w.pool));
    cpool_pool_stats after = stats_of(w.pool);
    CHECK_STATS_SANE(after);
    CHECK_EQ(after.allocated_bytes, before.allocated_bytes);
    CHECK_GE(after.reserved_bytes, after.allocated_bytes);
    CHECK_LE(after.reserved_bytes, before.reserved_bytes);
    CHECK_GT(after.graph_reserved_bytes, 0);
    CHECK_EQ(after.host_kept_bytes, 0);
    /* The host buffer of the copy stays for the next suspend, until a trim. */
    CHECK_GE(after.host_reserved_bytes, during.host_kept_bytes);

    CHECK_BLOCKS(w.s, &w.b);
    CHECK_PATTERN(w.s, w.in, 2 * MiB, w.in_seed);
    CHECK_EQUAL_BYTES(w.s, w.gc.out, w.want_out, OUT_BYTES);
    CHECK_EQUAL_BYTES(w.s, w.gc.small_out, w.want_small, SMALL_OUT_BYTES);
    CHECK_EQUAL_BYTES(w.s, w.cc.outs[1], w.want_call, CALL_OUT_BYTES);
    CHECK_GRAPHS_REPLAY(&w);

    CHECK_OK(cpool_pool_trim(w.pool));
    CHECK_EQ(stats_of(w.pool).host_reserved_bytes, 0);

    /* A second round, with the buffer given back: the same again. */
    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(stats_of(w.pool).host_kept_bytes, world_live_bytes(&w));
    REQUIRE_OK(cpool_pool_resume(w.pool));
    CHECK_BLOCKS(w.s, &w.b);
    CHECK_GRAPHS_REPLAY(&w);

    /* The pool serves new allocations after the resume, apart from the
     * live blocks. */
    void *p = NULL;
    CHECK_OK(cpool_alloc(w.pool, 6 * MiB, w.s, &p));
    if (p) {
        for (int i = 0; i < w.b.count; i++) CHECK(!ranges_overlap(p, 6 * MiB, w.b.p[i], w.b.n[i]));
        CHECK_OK(cpool_memset_async(w.s, p, 0x11, 6 * MiB));
        CHECK_BYTES(w.s, p, 6 * MiB, 0x11);
        CHECK_OK(cpool_free(w.pool, p, w.s));
    }
    CHECK_BLOCKS(w.s, &w.b);
}

/* A graph captured before the suspend and launched first after the resume
 * writes what it would have written. */
static void graph_first_launched_after_resume(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *in = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 1 * MiB, fx.s, &in));
    REQUIRE(WRITE_PATTERN(fx.s, in, 1 * MiB, 77));
    static graph_ctx gc;
    memset(&gc, 0, sizeof gc);
    gc.pool = fx.pool;
    gc.in = in;
    gc.in_bytes = 1 * MiB;
    gc.fill = 0x99;
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, body_graph, &gc, &g));
    CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_SUSPENDED_STATS(fx.pool);
    CHECK_OK(cpool_pool_resume(fx.pool));
    static unsigned char want_out[OUT_BYTES], want_small[SMALL_OUT_BYTES];
    expected_outputs(&gc, 77, want_out, want_small);
    LAUNCH_OK(g, fx.s);
    CHECK_EQ(aload(&gc.runs), 1);
    CHECK_EQUAL_BYTES(fx.s, gc.out, want_out, OUT_BYTES);
    CHECK_EQUAL_BYTES(fx.s, gc.small_out, want_small, SMALL_OUT_BYTES);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(fx.pool, gc.out, fx.s));
    CHECK_OK(cpool_free(fx.pool, gc.small_out, fx.s));
    CHECK_OK(cpool_free(fx.pool, in, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
}

/* The suspend waits for a launch still running and for stream work on the
 * pool's blocks: what they write after a slow step is kept, not lost. */
typedef struct slow_ctx {
    cpool_pool *pool;
    sleep_set slow;
    int done;
    void *out;
} slow_ctx;

static cpool_status body_slow(cpool_stream *s, void *arg) {
    slow_ctx *c = (slow_ctx *)arg;
    cpool_status st = cpool_launch_host(s, cb_sleep_set, &c->slow);
    if (st == CPOOL_OK) st = cpool_alloc_output(c->pool, 64 * KiB, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memset_async(s, c->out, 0x6b, 64 * KiB);
    return st;
}

static void suspend_waits_for_running_work(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    static slow_ctx c;
    memset(&c, 0, sizeof c);
    c.pool = fx.pool;
    c.slow = (sleep_set){.ms = 100, .flag = &c.done, .value = 1};
    cpool_graph *g = NULL;
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, body_slow, &c, &g));
    CHECK_EQ(aload(&c.done), 0);
    CHECK_OK(cpool_graph_launch(g, fx.s));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(aload(&c.done), 1);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    CHECK_BYTES(fx.s, c.out, 64 * KiB, 0x6b);

    /* Eager stream work behind a slow step, on another stream. */
    cpool_stream *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 3 * MiB, s2, &p));
    static int late;
    astore(&late, 0);
    static sleep_set slow2;
    slow2 = (sleep_set){.ms = 100, .flag = &late, .value = 1};
    CHECK_OK(cpool_launch_host(s2, cb_sleep_set, &slow2));
    CHECK_OK(cpool_memset_async(s2, p, 0x7c, 3 * MiB));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(aload(&late), 1);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    CHECK_BYTES(fx.s, p, 3 * MiB, 0x7c);
    CHECK_OK(cpool_free(fx.pool, p, s2));
    CHECK_OK(cpool_stream_synchronize(s2));
    cpool_stream_destroy(s2);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(fx.pool, c.out, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
}

/* The host buffer kept after a resume serves the next suspend where it is
 * large enough and is replaced where the live bytes grew. */
static void host_buffer_follows_the_live_bytes(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *p[3] = {NULL, NULL, NULL};
    static const size_t sizes[3] = {8192, 6 * MiB + 512, 512};
    REQUIRE_OK(cpool_alloc(fx.pool, sizes[0], fx.s, &p[0]));
    REQUIRE(WRITE_PATTERN(fx.s, p[0], sizes[0], 60));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(stats_of(fx.pool).host_kept_bytes, sizes[0]);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    uint64_t small_buffer = stats_of(fx.pool).host_reserved_bytes;
    CHECK_GE(small_buffer, sizes[0]);
    /* More live bytes: a larger buffer. */
    REQUIRE_OK(cpool_alloc(fx.pool, sizes[1], fx.s, &p[1]));
    REQUIRE(WRITE_PATTERN(fx.s, p[1], sizes[1], 61));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(stats_of(fx.pool).host_kept_bytes, sizes[0] + sizes[1]);
    CHECK_GE(stats_of(fx.pool).host_reserved_bytes, sizes[0] + sizes[1]);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, p[0], sizes[0], 60);
    CHECK_PATTERN(fx.s, p[1], sizes[1], 61);
    uint64_t large_buffer = stats_of(fx.pool).host_reserved_bytes;
    /* Fewer: the large buffer serves, and the bytes are the new ones. */
    CHECK_OK(cpool_free(fx.pool, p[1], fx.s));
    p[1] = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, sizes[2], fx.s, &p[2]));
    REQUIRE(WRITE_PATTERN(fx.s, p[2], sizes[2], 62));
    REQUIRE(WRITE_PATTERN(fx.s, p[0], sizes[0], 63));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_EQ(stats_of(fx.pool).host_kept_bytes, sizes[0] + sizes[2]);
    CHECK_EQ(stats_of(fx.pool).host_reserved_bytes, large_buffer);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, p[0], sizes[0], 63);
    CHECK_PATTERN(fx.s, p[2], sizes[2], 62);
    CHECK_OK(cpool_pool_trim(fx.pool));
    CHECK_EQ(stats_of(fx.pool).host_reserved_bytes, 0);
    for (int i = 0; i < 3; i++)
        if (p[i]) CHECK_OK(cpool_free(fx.pool, p[i], fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
}

/* ---- 2. only live bytes travel ------------------------------------------------------------- */

/* Cached eager memory, free memory between live blocks and graph scratch
 * are given back without a copy: the host holds the live bytes only. */
static void only_live_bytes_are_kept(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *big = NULL, *small = NULL, *hole = NULL, *tail = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 64 * MiB, fx.s, &big));
    CHECK_OK(cpool_memset_async(fx.s, big, 0x42, 64 * MiB));
    REQUIRE_OK(cpool_alloc(fx.pool, 4096, fx.s, &small));
    REQUIRE_OK(cpool_alloc(fx.pool, 1 * MiB, fx.s, &hole));
    REQUIRE_OK(cpool_alloc(fx.pool, 8192, fx.s, &tail));
    REQUIRE(WRITE_PATTERN(fx.s, small, 4096, 5));
    REQUIRE(WRITE_PATTERN(fx.s, tail, 8192, 6));
    CHECK_OK(cpool_free(fx.pool, big, fx.s));
    CHECK_OK(cpool_free(fx.pool, hole, fx.s));
    /* A graph whose scratch (16 MiB) is freed in its capture: no output. */
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture_begin(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL));
    void *scratch = NULL;
    CHECK_OK(cpool_alloc(fx.pool, 16 * MiB, fx.s, &scratch));
    CHECK_OK(cpool_memset_async(fx.s, scratch, 1, 16 * MiB));
    CHECK_OK(cpool_free(fx.pool, scratch, fx.s));
    CHECK_OK(cpool_capture_end(fx.s, &g));
    if (g) LAUNCH_OK(g, fx.s);
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_pool_stats before = stats_of(fx.pool);
    CHECK_EQ(before.allocated_bytes, 4096 + 8192);
    CHECK_GE(before.reserved_bytes, 64 * MiB);

    CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_SUSPENDED_STATS(fx.pool);
    cpool_pool_stats during = stats_of(fx.pool);
    CHECK_EQ(during.host_kept_bytes, 4096 + 8192);
    /* Host memory for the live bytes, not for what was reserved: at most a
     * page's rounding of each. */
    CHECK_GE(during.host_reserved_bytes, 4096 + 8192);
    CHECK_LE(during.host_reserved_bytes, 4 * MiB);
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, small, 4096, 5);
    CHECK_PATTERN(fx.s, tail, 8192, 6);
    if (g) LAUNCH_OK(g, fx.s);
    cpool_graph_release(g);
    CHECK_OK(cpool_free(fx.pool, small, fx.s));
    CHECK_OK(cpool_free(fx.pool, tail, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK(wait_graph_count(fx.pool, 0, WAIT_TIMEOUT_MS));
    CHECK_OK(cpool_pool_trim(fx.pool));
    cpool_pool_stats end = stats_of(fx.pool);
    CHECK_EQ(end.reserved_bytes, 0);
    CHECK_EQ(end.host_reserved_bytes, 0);
}

/* ---- 3. DISCARD ---------------------------------------------------------------------------- */

/* Addresses stay, bytes do not; no host memory is taken; graphs replay and,
 * their input written again, write the same bytes. */
static void discard_keeps_addresses_not_bytes(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, true));
    cpool_pool_stats before = stats_of(w.pool);
    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_DISCARD));
    CHECK_SUSPENDED_STATS(w.pool);
    cpool_pool_stats during = stats_of(w.pool);
    CHECK_EQ(during.host_kept_bytes, 0);
    CHECK_EQ(during.host_reserved_bytes, 0);
    CHECK_EQ(during.allocated_bytes, before.allocated_bytes);
    CHECK_EQ(during.graph_count, before.graph_count);
    REQUIRE_OK(cpool_pool_resume(w.pool));
    cpool_pool_stats after = stats_of(w.pool);
    CHECK_STATS_SANE(after);
    CHECK_EQ(after.allocated_bytes, before.allocated_bytes);
    CHECK_EQ(after.host_kept_bytes, 0);
    CHECK_EQ(after.host_reserved_bytes, 0);
    /* Every live block is usable at its address: write it and read it. */
    for (int i = 0; i < w.b.count; i++) REQUIRE(WRITE_PATTERN(w.s, w.b.p[i], w.b.n[i], w.b.seed[i] + 100));
    for (int i = 0; i < w.b.count; i++) w.b.seed[i] += 100;
    CHECK_BLOCKS(w.s, &w.b);
    REQUIRE(WRITE_PATTERN(w.s, w.in, 2 * MiB, w.in_seed));
    CHECK_GRAPHS_REPLAY(&w);
}

/* ---- 4. while suspended -------------------------------------------------------------------- */

static cpool_status body_count(cpool_stream *s, void *ctx) {
    (void)s;
    ainc((int *)ctx);
    return CPOOL_OK;
}

typedef struct alloc_from {
    cpool_pool *pool;
    size_t bytes;
    cpool_status st;
    void *p;
} alloc_from;

/* A capture body that allocates `bytes` from `pool` (bound to the capture,
 * or another pool). */
static cpool_status body_alloc_from(cpool_stream *s, void *ctx) {
    alloc_from *a = (alloc_from *)ctx;
    a->st = cpool_alloc(a->pool, a->bytes, s, &a->p);
    return a->st;
}

static void snapshot_path(char *path, size_t n, const char *what) {
    const char *dir = getenv("TMPDIR");
    snprintf(path, n, "%s/cpool-suspend-%s-%ld.json", dir && *dir ? dir : "/tmp", what, (long)getpid());
}

/* What a snapshot says: its stats, the sizes of its segments summed, its
 * physical bytes, and its "suspended" (false, or what the resume maps
 * back: docs/SNAPSHOT.md). */
typedef struct snapshot_says {
    int read, suspended;
    uint64_t reserved, host_kept, segment_bytes, physical_bytes;
    uint64_t back_reserved, back_graph_reserved, back_segments; /* "suspended"'s */
} snapshot_says;

static uint64_t json_u64(const json *j, const char *key) {
    const json *v = json_get(j, key);
    if (!v || !v->is_integer) {
        check_report_(__FILE__, __LINE__, "the snapshot has no integer \"%s\"", key);
        return UINT64_MAX;
    }
    return v->integer;
}

static snapshot_says read_snapshot(cpool_pool *pool) {
    snapshot_says says;
    memset(&says, 0, sizeof says);
    char path[256];
    snapshot_path(path, sizeof path, "snapshot");
    if (!CHECK_OK(cpool_pool_write_snapshot(pool, path))) return says;
    char *text = json_read_file(path);
    remove(path);
    char error[160] = "";
    json *root = text ? json_parse(text, error, sizeof error) : NULL;
    free(text);
    if (!root) {
        check_report_(__FILE__, __LINE__, "the snapshot could not be read back as JSON: %s", error);
        return says;
    }
    const json *stats = json_get(root, "stats"), *segments = json_get(root, "segments");
    const json *suspended = json_get(root, "suspended");
    CHECK(stats && segments && segments->kind == JSON_ARRAY);
    if (stats && segments && segments->kind == JSON_ARRAY) {
        says.read = 1;
        says.reserved = json_u64(stats, "reserved_bytes");
        says.host_kept = json_u64(stats, "host_kept_bytes");
        for (size_t i = 0; i < segments->count; i++) says.segment_bytes += json_u64(segments->items[i], "size");
        says.physical_bytes = json_u64(json_get(root, "physical"), "bytes");
        if (!suspended) {
            check_report_(__FILE__, __LINE__, "the snapshot does not say whether the pool is suspended");
        } else if (suspended->kind == JSON_OBJECT) {
            says.suspended = 1;
            says.back_reserved = json_u64(suspended, "reserved_bytes");
            says.back_graph_reserved = json_u64(suspended, "graph_reserved_bytes");
            says.back_segments = json_u64(suspended, "segment_count");
        } else {
            CHECK(suspended->kind == JSON_BOOL && !suspended->boolean);
        }
    }
    json_free(root);
    return says;
}

/* A snapshot of a suspended pool says so; its stats are cpool_pool_get_stats's
 * (no device memory, the kept bytes); its segments and pages are listed as
 * the resume brings them back, and "suspended" says what that maps: after
 * the resume the stats and the snapshot say the same (docs/SNAPSHOT.md). */
static void check_suspended_snapshot(cpool_pool *pool, cpool_stream *s) {
    cpool_pool_stats st = stats_of(pool);
    snapshot_says during = read_snapshot(pool);
    if (!during.read) return;
    CHECK(during.suspended);
    CHECK_EQ(during.reserved, 0);
    CHECK_EQ(during.host_kept, st.host_kept_bytes);
    CHECK_OK(cpool_pool_resume(pool));
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_pool_stats back = stats_of(pool);
    snapshot_says after = read_snapshot(pool);
    CHECK(!after.suspended);
    CHECK_EQ(during.back_reserved, back.reserved_bytes);
    CHECK_EQ(during.back_graph_reserved, back.graph_reserved_bytes);
    CHECK_EQ(during.back_segments, back.segment_count);
    CHECK_EQ(during.segment_bytes, after.segment_bytes);
    CHECK_EQ(during.physical_bytes, after.physical_bytes);
    CHECK_EQ(after.reserved, back.reserved_bytes);
}

static void while_suspended_only_memory_calls_are_refused(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, false));
    static drop_log log;
    static tracked objs[3];
    drop_log_init(&log);
    for (int i = 0; i < 3; i++) tracked_init(&objs[i], &log, i, NULL);
    CHECK_OK(cpool_pool_record(w.pool, &objs[0], tracked_drop, NULL));
    cpool_stream *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    cpool_pool *other = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    void *other_block = NULL;
    REQUIRE_OK(cpool_alloc(other, 4096, s2, &other_block));
    void *victim = NULL;
    REQUIRE_OK(cpool_alloc(w.pool, 3 * MiB, w.s, &victim));
    REQUIRE(WRITE_PATTERN(w.s, victim, 3 * MiB, 31));
    unsigned char *host = (unsigned char *)malloc(64 * KiB);
    REQUIRE(host != NULL);
    memset(host, 0x17, 64 * KiB);

    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_stats before = stats_of(w.pool);
    cpool_pool_stats other_before = stats_of(other);
    uint64_t replays = cpool_graph_replays(w.g);
    int runs = aload(&w.gc.runs);

    /* Allocations. */
    void *p = (void *)host;
    CHECK_STATUS(cpool_alloc(w.pool, 4096, w.s, &p), CPOOL_ERR_SUSPENDED);
    CHECK_PTR_EQ(p, host);
    CHECK(strstr(cpool_last_error(), "cpool_alloc"));
    CHECK_STATUS(cpool_alloc(w.pool, 64 * MiB, w.s, &p), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_alloc_output(w.pool, 4096, w.s, &p), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_alloc_output"));
    CHECK_PTR_EQ(p, host);

    /* Launches and uploads of graphs holding it. */
    CHECK_STATUS(cpool_graph_launch(w.g, w.s), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_graph_launch"));
    CHECK_STATUS(cpool_graph_launch(w.call, s2), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_graph_upload(w.g, w.s), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_graph_upload"));
    CHECK_OK(cpool_stream_synchronize(w.s));
    CHECK_EQ(cpool_graph_replays(w.g), replays);
    CHECK_EQ(aload(&w.gc.runs), runs);

    /* Captures that would hold it. */
    CHECK_STATUS(cpool_capture_begin(w.s, w.pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_capture_begin"));
    check_not_capturing(w.s);
    int bodies = 0;
    cpool_graph *g = (cpool_graph *)host;
    CHECK_STATUS(cpool_capture(w.s, w.pool, CPOOL_CAPTURE_GLOBAL, body_count, &bodies, &g), CPOOL_ERR_SUSPENDED);
    CHECK_EQ(bodies, 0);
    CHECK(g == NULL || g == (cpool_graph *)host);
    check_not_capturing(w.s);
    /* A capture into another pool whose body allocates from this one. */
    alloc_from af = {w.pool, 4096, CPOOL_OK, host};
    g = NULL;
    CHECK_STATUS(cpool_capture(s2, other, CPOOL_CAPTURE_GLOBAL, body_alloc_from, &af, &g), CPOOL_ERR_SUSPENDED);
    CHECK_EQ(af.st, CPOOL_ERR_SUSPENDED);
    CHECK_PTR_EQ(af.p, host);
    CHECK(g == NULL);
    check_not_capturing(s2);
    /* A graphed call whose body allocates from it. */
    call_ctx cc;
    memset(&cc, 0, sizeof cc);
    cc.pool = w.pool;
    g = (cpool_graph *)host;
    CHECK_STATUS(cpool_graphed_call(w.s, w.pool, CPOOL_CAPTURE_GLOBAL, 1, body_call, &cc, &g), CPOOL_ERR_SUSPENDED);
    CHECK(g == NULL);
    CHECK_EQ(cc.calls, 0);
    check_not_capturing(w.s);

    /* Copies to, from and inside its memory, at a block's start and inside it. */
    CHECK_STATUS(cpool_memcpy_async(w.s, host, victim, 4096), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_memcpy_async"));
    CHECK_STATUS(cpool_memcpy_async(w.s, (char *)victim + 2 * MiB + 100, host, 4096), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_memcpy_async(w.s, victim, w.in, 4096), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_memcpy_async(w.s, other_block, victim, 4096), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_memcpy_async(w.s, w.gc.out, host, 4096), CPOOL_ERR_SUSPENDED);
    CHECK_STATUS(cpool_memset_async(w.s, victim, 0, 3 * MiB), CPOOL_ERR_SUSPENDED);
    CHECK(strstr(cpool_last_error(), "cpool_memset_async"));
    CHECK_STATUS(cpool_memset_async(w.s, (char *)w.gc.small_out + 512, 0, 16), CPOOL_ERR_SUSPENDED);
    CHECK_OK(cpool_stream_synchronize(w.s));
    /* Other memory is not refused. */
    CHECK_OK(cpool_memcpy_async(s2, other_block, host, 4096));
    CHECK_OK(cpool_memset_async(s2, other_block, 0x17, 4096));
    CHECK_OK(cpool_stream_synchronize(s2));

    CHECK_ALL_STATS_EQ(stats_of(w.pool), before);
    CHECK_ALL_STATS_EQ(stats_of(other), other_before);
    CHECK(cpool_pool_is_suspended(w.pool));

    /* What works: records, buffer counts, stats, snapshots, trims, seals,
     * a second suspend (of either mode), clear_buffers. */
    size_t index = 99;
    CHECK_OK(cpool_pool_record(w.pool, &objs[1], tracked_drop, &index));
    CHECK_EQ(index, 1);
    CHECK_EQ(cpool_pool_buffer_count(w.pool), 2);
    CHECK_OK(cpool_pool_trim(w.pool));
    CHECK_ALL_STATS_EQ(stats_of(w.pool), before);
    CHECK_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_DISCARD)); /* changes nothing: the bytes stay kept */
    CHECK_ALL_STATS_EQ(stats_of(w.pool), before);
    cpool_pool_seal(w.pool);
    CHECK(cpool_pool_is_sealed(w.pool));
    cpool_pool_unseal(w.pool);
    cpool_graph_stats gs;
    memset(&gs, 0, sizeof gs);
    gs.struct_size = sizeof gs;
    CHECK_OK(cpool_graph_get_stats(w.g, &gs));
    CHECK_EQ(cpool_graph_pool(w.g), w.pool);
    cpool_pool_clear_buffers(w.pool);
    CHECK_EQ(aload(&log.count), 2);
    CHECK_EQ(cpool_pool_buffer_count(w.pool), 0);
    CHECK(cpool_pool_is_suspended(w.pool));

    /* A free: the block goes, the others stay. */
    CHECK_OK(cpool_free(w.pool, victim, w.s));
    cpool_pool_stats freed = stats_of(w.pool);
    CHECK_EQ(freed.allocated_bytes, before.allocated_bytes - 3 * MiB);
    CHECK_EQ(freed.free_count, before.free_count + 1);
    CHECK_EQ(freed.reserved_bytes, 0);
    CHECK_STATUS(cpool_free(w.pool, victim, w.s), CPOOL_ERR_INVALID_ARGUMENT); /* twice */

    CHECK_OK(cpool_pool_resume(w.pool));
    CHECK(!cpool_pool_is_suspended(w.pool));
    cpool_pool_stats resumed = stats_of(w.pool);
    CHECK_OK(cpool_pool_resume(w.pool)); /* not suspended: changes nothing */
    CHECK_ALL_STATS_EQ(stats_of(w.pool), resumed);
    CHECK_PATTERN(w.s, w.in, 2 * MiB, w.in_seed);
    CHECK_EQUAL_BYTES(w.s, w.gc.out, w.want_out, OUT_BYTES);
    /* Cleared after the capture: the graphs are stale now, not suspended. */
    CHECK_STATUS(cpool_graph_launch(w.g, w.s), CPOOL_ERR_STALE_GRAPH);
    /* The freed block's memory serves a new allocation. */
    CHECK_OK(cpool_alloc(w.pool, 3 * MiB, w.s, &p));
    if (p != host) {
        CHECK_OK(cpool_memset_async(w.s, p, 0x21, 3 * MiB));
        CHECK_BYTES(w.s, p, 3 * MiB, 0x21);
        CHECK_OK(cpool_free(w.pool, p, w.s));
    }
    CHECK_OK(cpool_stream_synchronize(w.s));
    CHECK_OK(cpool_free(other, other_block, s2));
    CHECK_OK(cpool_stream_synchronize(s2));
    cpool_pool_release(other);
    cpool_stream_destroy(s2);
    free(host);
    for (int i = 0; i < 2; i++) CHECK_EQ(aload(&objs[i].drops), 1);
}

/* A pool not suspended: resume is a no-op, is_suspended false, and a
 * suspend of an empty pool works. */
static void resume_without_suspend_changes_nothing(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 4096, fx.s, &p));
    REQUIRE(WRITE_PATTERN(fx.s, p, 4096, 3));
    cpool_pool_stats before = stats_of(fx.pool);
    CHECK(!cpool_pool_is_suspended(fx.pool));
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    CHECK_PATTERN(fx.s, p, 4096, 3);
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));

    cpool_pool *empty = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &empty));
    CHECK_OK(cpool_pool_suspend(empty, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK(cpool_pool_is_suspended(empty));
    CHECK_EQ(stats_of(empty).host_kept_bytes, 0);
    CHECK_OK(cpool_pool_resume(empty));
    CHECK(!cpool_pool_is_suspended(empty));
    CHECK_OK(cpool_alloc(empty, 4096, fx.s, &p));
    CHECK_OK(cpool_free(empty, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_pool_release(empty);
}

/* ---- 5. refusals --------------------------------------------------------------------------- */

#define CHECK_REFUSED(call, status, name)                                                                              \
    do {                                                                                                               \
        if (CHECK_STATUS(call, status)) CHECK(strstr(cpool_last_error(), name));                                       \
    } while (0)

/* A capture using the pool (bound to it, or allocating from it while bound
 * to another): suspend refuses and changes nothing. */
static void suspend_refused_while_a_capture_uses_the_pool(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 4096, fx.s, &p));
    REQUIRE(WRITE_PATTERN(fx.s, p, 4096, 8));
    cpool_stream *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s2));

    /* Bound to it. */
    REQUIRE_OK(cpool_capture_begin(s2, fx.pool, CPOOL_CAPTURE_RELAXED));
    void *cap = NULL;
    CHECK_OK(cpool_alloc(fx.pool, 8192, s2, &cap));
    cpool_pool_stats before = stats_of(fx.pool);
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_suspend");
    CHECK(!cpool_pool_is_suspended(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    cpool_graph *g = NULL;
    CHECK_OK(cpool_capture_end(s2, &g));
    if (g) LAUNCH_OK(g, s2);
    cpool_graph_release(g);
    if (cap) CHECK_OK(cpool_free(fx.pool, cap, s2));
    CHECK_OK(cpool_stream_synchronize(s2));

    /* Bound to another pool, allocating from this one. */
    cpool_pool *other = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    REQUIRE_OK(cpool_capture_begin(s2, other, CPOOL_CAPTURE_RELAXED));
    cap = NULL;
    CHECK_OK(cpool_alloc(fx.pool, 8192, s2, &cap));
    before = stats_of(fx.pool);
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK(!cpool_pool_is_suspended(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    /* The other pool, which the capture is bound to, is refused too. */
    CHECK_REFUSED(cpool_pool_suspend(other, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    g = NULL;
    CHECK_OK(cpool_capture_end(s2, &g));
    cpool_graph_release(g);
    if (cap) CHECK_OK(cpool_free(fx.pool, cap, s2));
    CHECK_OK(cpool_stream_synchronize(s2));

    /* The capture over, the suspend works. */
    CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, p, 4096, 8);
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_pool_release(other);
    cpool_stream_destroy(s2);
}

typedef struct in_callback {
    cpool_pool *pool;
    cpool_status suspend_st, resume_st;
    int suspended_seen;
    char message[256];
    int done;
} in_callback;

static void cb_suspend(void *arg) {
    in_callback *c = (in_callback *)arg;
    c->suspend_st = cpool_pool_suspend(c->pool, CPOOL_SUSPEND_KEEP_CONTENTS);
    snprintf(c->message, sizeof c->message, "%s", cpool_last_error());
    c->suspended_seen = cpool_pool_is_suspended(c->pool);
    astore(&c->done, 1);
}

static void cb_resume(void *arg) {
    in_callback *c = (in_callback *)arg;
    c->resume_st = cpool_pool_resume(c->pool);
    snprintf(c->message, sizeof c->message, "%s", cpool_last_error());
    c->suspended_seen = cpool_pool_is_suspended(c->pool);
    astore(&c->done, 1);
}

/* Inside a stream callback, where it would wait for itself, suspend and
 * resume refuse at once and change nothing. */
static void suspend_and_resume_refused_in_a_stream_callback(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 4096, fx.s, &p));
    REQUIRE(WRITE_PATTERN(fx.s, p, 4096, 9));
    cpool_pool_stats before = stats_of(fx.pool);
    static in_callback c;
    memset(&c, 0, sizeof c);
    c.pool = fx.pool;
    c.suspend_st = CPOOL_OK;
    REQUIRE_OK(cpool_launch_host(fx.s, cb_suspend, &c));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK(aload(&c.done));
    CHECK_EQ(c.suspend_st, CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(c.message, "cpool_pool_suspend"));
    CHECK(!c.suspended_seen);
    CHECK(!cpool_pool_is_suspended(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    CHECK_PATTERN(fx.s, p, 4096, 9);

    /* Suspended outside, a resume inside is refused; the pool stays so. */
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_stats during = stats_of(fx.pool);
    memset(&c, 0, sizeof c);
    c.pool = fx.pool;
    c.resume_st = CPOOL_OK;
    REQUIRE_OK(cpool_launch_host(fx.s, cb_resume, &c));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK(aload(&c.done));
    CHECK_EQ(c.resume_st, CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(c.message, "cpool_pool_resume"));
    CHECK(c.suspended_seen);
    CHECK(cpool_pool_is_suspended(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), during);
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, p, 4096, 9);
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
}

/* A mode outside the enum, NULL and dead handles. */
static void bad_arguments_are_refused(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 4096, fx.s, &p));
    REQUIRE(WRITE_PATTERN(fx.s, p, 4096, 10));
    cpool_pool_stats before = stats_of(fx.pool);
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, (cpool_suspend_mode)2), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, (cpool_suspend_mode)-1), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, (cpool_suspend_mode)1000), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK(!cpool_pool_is_suspended(fx.pool));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    /* A bad mode on a suspended pool is refused too. */
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_stats during = stats_of(fx.pool);
    CHECK_REFUSED(cpool_pool_suspend(fx.pool, (cpool_suspend_mode)7), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_suspend");
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), during);
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_PATTERN(fx.s, p, 4096, 10);
    before = stats_of(fx.pool); /* the resume keeps its host buffer (host_reserved_bytes) */

    CHECK_REFUSED(cpool_pool_suspend(NULL, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_resume(NULL), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_resume");
    CHECK(!cpool_pool_is_suspended(NULL));

    /* Dead: released, also suspended at its release, and after its memory
     * may have gone to a new pool. */
    cpool_pool *dead = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &dead));
    REQUIRE_OK(cpool_pool_suspend(dead, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_release(dead);
    CHECK_REFUSED(cpool_pool_suspend(dead, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT,
                  "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_resume(dead), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_resume");
    CHECK(!cpool_pool_is_suspended(dead));
    cpool_pool *fresh = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &fresh));
    CHECK_REFUSED(cpool_pool_suspend(dead, CPOOL_SUSPEND_DISCARD), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_suspend");
    CHECK(!cpool_pool_is_suspended(fresh));
    CHECK_OK(cpool_pool_suspend(fresh, CPOOL_SUSPEND_DISCARD));
    CHECK(!cpool_pool_is_suspended(dead));
    CHECK_REFUSED(cpool_pool_resume(dead), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_resume");
    CHECK(cpool_pool_is_suspended(fresh));
    cpool_pool_release(fresh);

    /* Handles of another type. */
    CHECK_REFUSED(cpool_pool_suspend((cpool_pool *)(void *)fx.s, CPOOL_SUSPEND_KEEP_CONTENTS),
                  CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_suspend");
    CHECK_REFUSED(cpool_pool_resume((cpool_pool *)(void *)dev), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_resume");
    CHECK(!cpool_pool_is_suspended((cpool_pool *)(void *)fx.s));
    CHECK_ALL_STATS_EQ(stats_of(fx.pool), before);
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
}

/* Plain segments cannot keep their addresses without their memory:
 * suspend is unsupported there, and says so. */
static void plain_segments_are_unsupported(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    setenv("CPOOL_VIRTUAL_MEMORY", "0", 1);
    cpool_pool *no_vm = NULL;
    cpool_status st = cpool_pool_create(dev, NULL, &no_vm);
    unsetenv("CPOOL_VIRTUAL_MEMORY");
    REQUIRE_OK(st);
    cpool_pool_options opts = {.struct_size = sizeof opts, .plain_segments = true};
    cpool_pool *plain = NULL;
    REQUIRE_OK(cpool_pool_create(dev, &opts, &plain));
    cpool_pool *pools[2] = {no_vm, plain};
    for (int i = 0; i < 2; i++) {
        CHECK(!cpool_pool_grows_in_place(pools[i]));
        void *p = NULL;
        REQUIRE_OK(cpool_alloc(pools[i], 3 * MiB, fx.s, &p));
        REQUIRE(WRITE_PATTERN(fx.s, p, 3 * MiB, 11 + (uint32_t)i));
        cpool_pool_stats before = stats_of(pools[i]);
        CHECK_REFUSED(cpool_pool_suspend(pools[i], CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_UNSUPPORTED,
                      "cpool_pool_suspend");
        CHECK_REFUSED(cpool_pool_suspend(pools[i], CPOOL_SUSPEND_DISCARD), CPOOL_ERR_UNSUPPORTED, "cpool_pool_suspend");
        CHECK(!cpool_pool_is_suspended(pools[i]));
        CHECK_OK(cpool_pool_resume(pools[i])); /* not suspended */
        CHECK_ALL_STATS_EQ(stats_of(pools[i]), before);
        CHECK_PATTERN(fx.s, p, 3 * MiB, 11 + (uint32_t)i);
        CHECK_OK(cpool_free(pools[i], p, fx.s));
    }
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_pool_release(no_vm);
    cpool_pool_release(plain);
}

/* The snapshot of a suspended pool (see check_suspended_snapshot). */
static void snapshot_of_a_suspended_pool(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, false));
    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    check_suspended_snapshot(w.pool, w.s); /* resumes it */
    CHECK(!cpool_pool_is_suspended(w.pool));
}

/* Blocks freed while suspended, cached segments of their own and blocks
 * inside shared segments, then a trim while still suspended: the resume
 * restores the other blocks and nothing of the freed ones is written
 * anywhere (the trim gave nothing back: the pool held no device memory). */
static void free_and_trim_while_suspended_then_resume(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    enum { N = 6 };
    static const size_t sizes[N] = {24 * MiB + 512, 4096, 12 * MiB, 3 * MiB + 512, 512, 5 * MiB};
    void *p[N];
    for (int i = 0; i < N; i++) {
        REQUIRE_OK(cpool_alloc(fx.pool, sizes[i], fx.s, &p[i]));
        REQUIRE(WRITE_PATTERN(fx.s, p[i], sizes[i], 40 + (uint32_t)i));
    }
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_stats during = stats_of(fx.pool);
    for (int i = 0; i < N; i += 2) CHECK_OK(cpool_free(fx.pool, p[i], fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_OK(cpool_pool_trim(fx.pool));
    cpool_pool_stats freed = stats_of(fx.pool);
    CHECK_EQ(freed.reserved_bytes, 0);
    CHECK_EQ(freed.allocated_bytes, during.allocated_bytes - sizes[0] - sizes[2] - sizes[4]);
    CHECK_EQ(freed.host_reserved_bytes, during.host_reserved_bytes); /* the kept bytes stay until the resume */
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    for (int i = 1; i < N; i += 2) CHECK_PATTERN(fx.s, p[i], sizes[i], 40 + (uint32_t)i);
    /* The freed memory serves new blocks, which hold what is written. */
    for (int i = 0; i < N; i += 2) {
        REQUIRE_OK(cpool_alloc(fx.pool, sizes[i], fx.s, &p[i]));
        REQUIRE(WRITE_PATTERN(fx.s, p[i], sizes[i], 50 + (uint32_t)i));
    }
    for (int i = 0; i < N; i++) CHECK_PATTERN(fx.s, p[i], sizes[i], (i % 2 ? 40 : 50) + (uint32_t)i);
    for (int i = 0; i < N; i++) CHECK_OK(cpool_free(fx.pool, p[i], fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_OK(cpool_pool_trim(fx.pool));
    CHECK_EQ(stats_of(fx.pool).reserved_bytes, 0);
    CHECK_EQ(stats_of(fx.pool).host_reserved_bytes, 0);
}

/* A parameter block lives in its pool's memory: while the pool is
 * suspended a set is refused like any copy there (it would write memory
 * the device no longer has), and with KEEP_CONTENTS its value comes back. */
static void param_set_refused_while_suspended(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    cpool_param *param = NULL;
    REQUIRE_OK(cpool_param_create(fx.pool, 64, &param));
    int v = 7, got = 0;
    REQUIRE_OK(cpool_param_set(param, &v, sizeof v, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    /* Its block, whose size is the request rounded to the allocator's grain. */
    CHECK_GE(stats_of(fx.pool).host_kept_bytes, 64);
    CHECK_LE(stats_of(fx.pool).host_kept_bytes, 512);
    int other = 9;
    CHECK_REFUSED(cpool_param_set(param, &other, sizeof other, fx.s), CPOOL_ERR_SUSPENDED, "cpool_param_set");
    CHECK_STATUS(cpool_memcpy_async(fx.s, &got, cpool_param_device_ptr(param), sizeof got), CPOOL_ERR_SUSPENDED);
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_PTR_EQ(cpool_param_device_ptr(param), cpool_param_device_ptr(param));
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    CHECK_OK(read_back(fx.s, &got, cpool_param_device_ptr(param), sizeof got));
    CHECK_EQ(got, 7);
    CHECK_OK(cpool_param_set(param, &other, sizeof other, fx.s));
    CHECK_OK(read_back(fx.s, &got, cpool_param_device_ptr(param), sizeof got));
    CHECK_EQ(got, 9);
}

/* A graph captured into another pool that allocated from the suspended one
 * holds it too: its launch and upload are refused; an update of a graph
 * holding the pool (a capture that would hold it) is refused and leaves
 * the graph as it was. */
static void graphs_holding_a_suspended_pool_are_refused(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, false));
    cpool_stream *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    cpool_pool *other = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &other));
    alloc_from af = {w.pool, 4096, CPOOL_OK, NULL};
    cpool_graph *both = NULL;
    REQUIRE_OK(cpool_capture(s2, other, CPOOL_CAPTURE_GLOBAL, body_alloc_from, &af, &both));
    LAUNCH_OK(both, s2);
    REQUIRE_OK(cpool_pool_suspend(w.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    uint64_t replays = cpool_graph_replays(both);
    CHECK_REFUSED(cpool_graph_launch(both, s2), CPOOL_ERR_SUSPENDED, "cpool_graph_launch");
    CHECK_REFUSED(cpool_graph_upload(both, s2), CPOOL_ERR_SUSPENDED, "cpool_graph_upload");
    CHECK_EQ(cpool_graph_replays(both), replays);
    CHECK(!cpool_pool_is_suspended(other));
    graph_ctx again = w.gc;
    CHECK_REFUSED(cpool_graph_update(w.g, w.s, body_graph, &again), CPOOL_ERR_SUSPENDED, "cpool_graph_update");
    check_not_capturing(w.s);
    CHECK_OK(cpool_pool_resume(w.pool));
    LAUNCH_OK(both, s2);
    CHECK_GRAPHS_REPLAY(&w); /* the old work: the update changed nothing */
    cpool_graph_release(both);
    if (af.p) CHECK_OK(cpool_free(w.pool, af.p, s2));
    CHECK_OK(cpool_stream_synchronize(s2));
    cpool_pool_release(other);
    cpool_stream_destroy(s2);
}

/* Graphs released while suspended (the fuzz_api violation of
 * crash-bce0d64c...): their outputs freed before the suspend, their arenas
 * are idle and quiet, but a suspended pool gives none back
 * (give_back_quiet_arenas), so the snapshot counts them and the resume maps
 * them; the first settle after it (the stats) gives back all but the
 * newest. The stats after the resume say at most what the snapshot said,
 * less only of graph memory; a trim gives back the rest. */
static void graphs_released_while_suspended(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    alloc_from big = {fx.pool, 3 * MiB, CPOOL_OK, NULL}, small = {fx.pool, 4096, CPOOL_OK, NULL};
    cpool_graph *gbig = NULL, *gsmall = NULL;
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, body_alloc_from, &big, &gbig));
    REQUIRE_OK(cpool_capture(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL, body_alloc_from, &small, &gsmall));
    LAUNCH_OK(gbig, fx.s);
    LAUNCH_OK(gsmall, fx.s);
    CHECK_OK(cpool_free(fx.pool, big.p, fx.s));
    CHECK_OK(cpool_free(fx.pool, small.p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD));
    cpool_graph_release(gbig);
    cpool_graph_release(gsmall);
    CHECK_EQ(stats_of(fx.pool).graph_count, 0);
    snapshot_says during = read_snapshot(fx.pool);
    CHECK(during.suspended);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    cpool_pool_stats back = stats_of(fx.pool); /* settles: the idle arenas but the newest go */
    CHECK_LE(back.reserved_bytes, during.back_reserved);
    CHECK_LE(back.graph_reserved_bytes, during.back_graph_reserved);
    CHECK_LE(back.segment_count, during.back_segments);
    CHECK_EQ(during.back_reserved - back.reserved_bytes, during.back_graph_reserved - back.graph_reserved_bytes);
    CHECK_OK(cpool_pool_trim(fx.pool));
    CHECK_EQ(stats_of(fx.pool).reserved_bytes, 0);
}

/* ---- 6. lifetimes while suspended ---------------------------------------------------------- */

/* The last release of a suspended pool (by the caller, then by its
 * graphs) drops its records once and gives everything back. */
static void last_release_while_suspended(cpool_device *dev) {
    cpool_stream *s = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    static drop_log log;
    static tracked objs[2];
    drop_log_init(&log);
    for (int i = 0; i < 2; i++) tracked_init(&objs[i], &log, i, NULL);

    /* No graph: the caller's release is the last. */
    cpool_pool *pool = NULL;
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &objs[0], tracked_drop, NULL));
    void *p = NULL, *q = NULL;
    CHECK_OK(cpool_alloc(pool, 5 * MiB, s, &p));
    CHECK_OK(cpool_alloc(pool, 4096, s, &q));
    CHECK_OK(cpool_memset_async(s, p, 1, 5 * MiB));
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_KEEP_CONTENTS));
    cpool_pool_release(pool);
    CHECK_EQ(aload(&objs[0].drops), 1);
    CHECK(!cpool_pool_is_suspended(pool));

    /* Graphs hold it: the graphs' last release ends it. */
    static graph_ctx gc;
    memset(&gc, 0, sizeof gc);
    REQUIRE_OK(cpool_pool_create(dev, NULL, &pool));
    CHECK_OK(cpool_pool_record(pool, &objs[1], tracked_drop, NULL));
    void *in = NULL;
    REQUIRE_OK(cpool_alloc(pool, 64 * KiB, s, &in));
    CHECK_OK(cpool_memset_async(s, in, 4, 64 * KiB));
    gc.pool = pool;
    gc.in = in;
    gc.in_bytes = 64 * KiB;
    gc.fill = 1;
    cpool_graph *g = NULL, *g2 = NULL;
    REQUIRE_OK(cpool_capture(s, pool, CPOOL_CAPTURE_GLOBAL, body_graph, &gc, &g));
    LAUNCH_OK(g, s);
    g2 = cpool_graph_retain(g);
    CHECK_OK(cpool_graph_launch(g, s)); /* still running, perhaps, at the suspend */
    CHECK_OK(cpool_pool_suspend(pool, CPOOL_SUSPEND_DISCARD));
    CHECK_EQ(aload(&gc.runs), 2); /* the suspend waited for the launch */
    cpool_pool_release(pool);
    CHECK_EQ(aload(&objs[1].drops), 0);
    CHECK(cpool_pool_is_suspended(cpool_graph_pool(g)));
    CHECK_STATUS(cpool_graph_launch(g2, s), CPOOL_ERR_SUSPENDED);
    cpool_graph_release(g);
    cpool_graph_release(g2);
    cpool_wait_deferred();
    CHECK(wait_for_int(&objs[1].drops, 1, WAIT_TIMEOUT_MS));
    CHECK_EQ(aload(&objs[1].drops), 1);
    cpool_stream_destroy(s);
}

/* A copy onto the pool's memory made while a suspend is under way (the
 * suspend waits for slow work on another stream) is either refused or
 * ordered before the suspend: then the suspend waits for it and keeps its
 * bytes. It never runs on memory already given back. */
typedef struct suspend_thread {
    cpool_pool *pool;
    cpool_status st;
} suspend_thread;

static void *suspend_on_a_thread(void *arg) {
    suspend_thread *t = (suspend_thread *)arg;
    t->st = cpool_pool_suspend(t->pool, CPOOL_SUSPEND_KEEP_CONTENTS);
    return NULL;
}

static void copy_during_a_suspend_is_refused_or_waited_for(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    cpool_stream *slow = NULL, *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &slow));
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 3 * MiB, fx.s, &p));
    REQUIRE(WRITE_PATTERN(fx.s, p, 3 * MiB, 70));
    /* The suspend waits for the device's streams: this one for 300 ms. */
    static int slow_done, late_done;
    astore(&slow_done, 0);
    astore(&late_done, 0);
    static sleep_set slow_work, late_work;
    slow_work = (sleep_set){.ms = 300, .flag = &slow_done, .value = 1};
    late_work = (sleep_set){.ms = 500, .flag = &late_done, .value = 1};
    REQUIRE_OK(cpool_launch_host(slow, cb_sleep_set, &slow_work));
    static suspend_thread t;
    t.pool = fx.pool;
    t.st = CPOOL_ERR_BACKEND;
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, suspend_on_a_thread, &t) == 0);
    sleep_ms(100); /* the suspend is waiting for `slow` now */
    /* Work behind a step that ends after the suspend's wait, then a fill. */
    CHECK_OK(cpool_launch_host(s2, cb_sleep_set, &late_work));
    cpool_status st = cpool_memset_async(s2, p, 0x5a, 3 * MiB);
    pthread_join(thread, NULL);
    CHECK_OK(t.st);
    CHECK_EQ(aload(&slow_done), 1);
    if (st == CPOOL_OK) CHECK_EQ(aload(&late_done), 1); /* ordered before the suspend: waited for */
    else CHECK_STATUS(st, CPOOL_ERR_SUSPENDED);
    CHECK_OK(cpool_stream_synchronize(s2));
    CHECK_OK(cpool_pool_resume(fx.pool));
    if (st == CPOOL_OK)
        CHECK_BYTES(fx.s, p, 3 * MiB, 0x5a);
    else
        CHECK_PATTERN(fx.s, p, 3 * MiB, 70);
    CHECK_OK(cpool_free(fx.pool, p, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    cpool_stream_destroy(s2);
    cpool_stream_destroy(slow);
}

/* ---- 7. races
 * ---------------------------------------------------------------------------
 */

enum { RACE_ROUNDS = 40, RACE_GRAPHS = 6 };

typedef struct race {
    cpool_device *dev;
    world *w;
    cpool_graph *spare[RACE_GRAPHS]; /* released by the releaser, one by one */
    void *spare_out[RACE_GRAPHS][2];
    int stop;
    int suspends, launches, refused_launches, allocs, refused_allocs, snapshots, other_captures;
} race;

static void *race_suspender(void *arg) {
    race *r = (race *)arg;
    for (int i = 0; i < RACE_ROUNDS; i++) {
        if (!CHECK_OK(cpool_pool_suspend(r->w->pool, CPOOL_SUSPEND_KEEP_CONTENTS))) break;
        CHECK(cpool_pool_is_suspended(r->w->pool));
        r->suspends++;
        sleep_ms(1);
        if (!CHECK_OK(cpool_pool_resume(r->w->pool))) break;
        sleep_ms(1);
    }
    astore(&r->stop, 1);
    return NULL;
}

/* Launches the pool's graph, one replay after another on one stream. */
static void *race_launcher(void *arg) {
    race *r = (race *)arg;
    cpool_stream *s = NULL;
    if (!CHECK_OK(cpool_stream_create(r->dev, &s))) return NULL;
    while (!aload(&r->stop)) {
        cpool_status st = cpool_graph_launch(r->w->g, s);
        if (st == CPOOL_OK)
            r->launches++;
        else if (CHECK_STATUS(st, CPOOL_ERR_SUSPENDED)) {
            r->refused_launches++;
            sleep_ms(1); /* a spin here would starve the suspender on a small machine */
        }
        if ((r->launches + r->refused_launches) % 8 == 0) CHECK_OK(cpool_stream_synchronize(s));
    }
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
    return NULL;
}

static void *race_allocator(void *arg) {
    race *r = (race *)arg;
    cpool_stream *s = NULL;
    if (!CHECK_OK(cpool_stream_create(r->dev, &s))) return NULL;
    unsigned n = 0;
    while (!aload(&r->stop)) {
        void *p = NULL;
        size_t bytes = (n++ % 3 == 0) ? 3 * MiB : 4096;
        cpool_status st = cpool_alloc(r->w->pool, bytes, s, &p);
        if (st == CPOOL_OK) {
            r->allocs++;
            st = cpool_memset_async(s, p, 0x66, bytes);
            if (st != CPOOL_OK) CHECK_STATUS(st, CPOOL_ERR_SUSPENDED);
            CHECK_OK(cpool_free(r->w->pool, p, s));
        } else if (CHECK_STATUS(st, CPOOL_ERR_SUSPENDED)) {
            r->refused_allocs++;
            sleep_ms(1);
        }
    }
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
    return NULL;
}

static void *race_observer(void *arg) {
    race *r = (race *)arg;
    char path[256];
    snapshot_path(path, sizeof path, "race");
    while (!aload(&r->stop)) {
        cpool_pool_stats st = stats_of(r->w->pool);
        CHECK_LE(st.graph_reserved_bytes, st.reserved_bytes);
        CHECK_OK(cpool_pool_write_snapshot(r->w->pool, path));
        CHECK_OK(cpool_pool_trim(r->w->pool));
        (void)cpool_pool_is_suspended(r->w->pool);
        r->snapshots++;
    }
    remove(path);
    return NULL;
}

static void *race_releaser(void *arg) {
    race *r = (race *)arg;
    for (int i = 0; i < RACE_GRAPHS; i++) {
        sleep_ms(3);
        cpool_graph_release(r->spare[i]);
        r->spare[i] = NULL;
    }
    return NULL;
}

static cpool_status body_other(cpool_stream *s, void *ctx) {
    cpool_pool *pool = (cpool_pool *)ctx;
    void *p = NULL;
    cpool_status st = cpool_alloc(pool, 3 * MiB, s, &p);
    if (st == CPOOL_OK) st = cpool_memset_async(s, p, 2, 3 * MiB);
    if (p && st == CPOOL_OK) st = cpool_free(pool, p, s);
    return st;
}

/* Captures into a pool of its own, launches and releases, all the while. */
static void *race_other_captures(void *arg) {
    race *r = (race *)arg;
    cpool_stream *s = NULL;
    cpool_pool *pool = NULL;
    if (!CHECK_OK(cpool_stream_create(r->dev, &s))) return NULL;
    if (CHECK_OK(cpool_pool_create(r->dev, NULL, &pool))) {
        while (!aload(&r->stop)) {
            cpool_graph *g = NULL;
            if (!CHECK_OK(cpool_capture(s, pool, CPOOL_CAPTURE_RELAXED, body_other, pool, &g))) break;
            CHECK_OK(cpool_graph_launch(g, s));
            cpool_graph_release(g);
            /* A suspend waits for the device's streams, as a last release
             * does: a stream fed faster than it runs would hold it up. */
            CHECK_OK(cpool_stream_synchronize(s));
            r->other_captures++;
        }
        CHECK_OK(cpool_stream_synchronize(s));
        CHECK(!cpool_pool_is_suspended(pool));
        cpool_pool_release(pool);
    }
    cpool_stream_destroy(s);
    return NULL;
}

static void suspend_and_resume_race_with_the_pools_users(cpool_device *dev) {
    static world w;
    REQUIRE(world_open(dev, &w, false)); /* the input and outputs travel: a few MiB each round */
    static race r;
    memset(&r, 0, sizeof r);
    r.dev = dev;
    r.w = &w;
    for (int i = 0; i < RACE_GRAPHS; i++) {
        static graph_ctx gc[RACE_GRAPHS];
        memset(&gc[i], 0, sizeof gc[i]);
        gc[i].pool = w.pool;
        gc[i].in = w.in;
        gc[i].in_bytes = 64 * KiB;
        gc[i].fill = (unsigned char)i;
        REQUIRE_OK(cpool_capture(w.s, w.pool, CPOOL_CAPTURE_GLOBAL, body_graph, &gc[i], &r.spare[i]));
        r.spare_out[i][0] = gc[i].out;
        r.spare_out[i][1] = gc[i].small_out;
    }
    CHECK_OK(cpool_stream_synchronize(w.s));
    pthread_t t[6];
    void *(*fn[6])(void *) = {race_suspender, race_launcher, race_allocator,
                              race_observer,  race_releaser, race_other_captures};
    int started = 0;
    for (; started < 6; started++)
        if (pthread_create(&t[started], NULL, fn[started], &r) != 0) break;
    CHECK_EQ(started, 6);
    if (started < 6) astore(&r.stop, 1);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    printf("  %d suspends, %d launches (%d refused), %d allocations (%d "
           "refused), %d snapshots, %d other captures\n",
           r.suspends, r.launches, r.refused_launches, r.allocs, r.refused_allocs, r.snapshots, r.other_captures);
    CHECK_EQ(r.suspends, RACE_ROUNDS);
    for (int i = 0; i < RACE_GRAPHS; i++) cpool_graph_release(r.spare[i]); /* where the releaser did not start */

    if (cpool_pool_is_suspended(w.pool)) CHECK_OK(cpool_pool_resume(w.pool));
    CHECK(!cpool_pool_is_suspended(w.pool));
    CHECK_BLOCKS(w.s, &w.b);
    CHECK_PATTERN(w.s, w.in, 2 * MiB, w.in_seed);
    CHECK_GRAPHS_REPLAY(&w);
    /* The released graphs' outputs are still live, with what their
     * capture's (never launched) replays would not have written: only
     * freed now. */
    for (int i = 0; i < RACE_GRAPHS; i++)
        for (int k = 0; k < 2; k++) CHECK_OK(cpool_free(w.pool, r.spare_out[i][k], w.s));
    CHECK_OK(cpool_stream_synchronize(w.s));
    CHECK(wait_graph_count(w.pool, 2, WAIT_TIMEOUT_MS));
    cpool_pool_stats st = stats_of(w.pool);
    CHECK_STATS_SANE(st);
    CHECK_EQ(st.allocated_bytes, world_live_bytes(&w));
}

/* A free of a block and a clear while suspended, from other threads while
 * the suspend and resume go on. */
typedef struct free_race {
    cpool_pool *pool;
    cpool_stream *s;
    void *blocks[64];
    int stop;
} free_race;

static void *free_race_freer(void *arg) {
    free_race *r = (free_race *)arg;
    for (int i = 0; i < 64; i++) {
        CHECK_OK(cpool_free(r->pool, r->blocks[i], r->s));
        if (i % 16 == 0) cpool_pool_clear_buffers(r->pool);
    }
    astore(&r->stop, 1);
    return NULL;
}

static void frees_and_clears_race_with_suspend(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    static free_race r;
    memset(&r, 0, sizeof r);
    r.pool = fx.pool;
    REQUIRE_OK(cpool_stream_create(dev, &r.s));
    static drop_log log;
    static tracked obj;
    drop_log_init(&log);
    tracked_init(&obj, &log, 0, NULL);
    CHECK_OK(cpool_pool_record(fx.pool, &obj, tracked_drop, NULL));
    void *keep = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 3 * MiB, fx.s, &keep));
    REQUIRE(WRITE_PATTERN(fx.s, keep, 3 * MiB, 12));
    for (int i = 0; i < 64; i++) {
        REQUIRE_OK(cpool_alloc(fx.pool, (size_t)(i % 4 + 1) * 64 * KiB, r.s, &r.blocks[i]));
        CHECK_OK(cpool_memset_async(r.s, r.blocks[i], i, 64 * KiB));
    }
    CHECK_OK(cpool_stream_synchronize(r.s));
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_race_freer, &r) == 0);
    int rounds = 0;
    while (!aload(&r.stop) || rounds < 4) {
        CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS));
        CHECK_OK(cpool_pool_resume(fx.pool));
        rounds++;
    }
    pthread_join(t, NULL);
    CHECK_EQ(aload(&obj.drops), 1);
    CHECK_PATTERN(fx.s, keep, 3 * MiB, 12);
    cpool_pool_stats st = stats_of(fx.pool);
    CHECK_EQ(st.allocated_bytes, 3 * MiB);
    CHECK_OK(cpool_free(fx.pool, keep, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_OK(cpool_stream_synchronize(r.s));
    cpool_stream_destroy(r.s);
    CHECK_OK(cpool_pool_trim(fx.pool));
    CHECK_EQ(stats_of(fx.pool).reserved_bytes, 0);
}

/* Graphs of nested scratch share pages; each resume maps the stretches
 * they share as runs that several of them map. While one thread suspends
 * and resumes the pool, another launches the graphs, and a third captures
 * a graph into the same pool and releases it (a capture may take a
 * released graph's arena, whose runs then become pages alone, only while
 * no launch can use them): no step may crash, every launch that is not
 * refused writes its graph's output, and at the end every graph replays
 * its bytes. */
enum { NEST_GRAPHS = 4, NEST_ROUNDS = 24 };
typedef struct nest_ctx {
    cpool_pool *pool;
    size_t scratch;
    int fill;
    void *out;
} nest_ctx;

typedef struct nest_race {
    cpool_device *dev;
    cpool_pool *pool;
    cpool_graph *g[NEST_GRAPHS];
    int stop, suspends, launches, captures;
} nest_race;

static cpool_status body_nest(cpool_stream *s, void *arg) {
    nest_ctx *c = (nest_ctx *)arg;
    void *scratch = NULL;
    cpool_status st = cpool_alloc(c->pool, c->scratch, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, c->fill, c->scratch);
    if (st == CPOOL_OK) st = cpool_alloc_output(c->pool, 16 * KiB, s, &c->out);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, c->out, scratch, 16 * KiB);
    if (scratch && st == CPOOL_OK) st = cpool_free(c->pool, scratch, s);
    return st;
}

/* Suspends and resumes until NEST_ROUNDS suspends were made and the
 * others had their turns awake (a bound on the tries, for a slow machine). */
static void *nest_suspender(void *arg) {
    nest_race *r = (nest_race *)arg;
    for (int tries = 0; tries < 4000; tries++) {
        if (r->suspends >= NEST_ROUNDS && aload(&r->launches) >= 16 && aload(&r->captures) >= 4) break;
        sleep_ms(2); /* awake a while */
        cpool_status st = cpool_pool_suspend(r->pool, tries % 2 ? CPOOL_SUSPEND_DISCARD : CPOOL_SUSPEND_KEEP_CONTENTS);
        if (st == CPOOL_ERR_INVALID_ARGUMENT) continue; /* a capture uses the pool */
        CHECK_OK(st);
        r->suspends++;
        sleep_ms(1);
        CHECK_OK(cpool_pool_resume(r->pool));
    }
    astore(&r->stop, 1);
    return NULL;
}

static void *nest_launcher(void *arg) {
    nest_race *r = (nest_race *)arg;
    cpool_stream *s = NULL;
    if (!CHECK_OK(cpool_stream_create(r->dev, &s))) return NULL;
    for (int n = 0; !aload(&r->stop); n++) {
        cpool_status st = cpool_graph_launch(r->g[n % NEST_GRAPHS], s);
        if (st == CPOOL_OK)
            astore(&r->launches, r->launches + 1); /* this thread alone writes it */
        else if (CHECK_STATUS(st, CPOOL_ERR_SUSPENDED))
            sleep_ms(1);
        if (n % 8 == 7) CHECK_OK(cpool_stream_synchronize(s));
    }
    CHECK_OK(cpool_stream_synchronize(s));
    cpool_stream_destroy(s);
    return NULL;
}

static void *nest_capturer(void *arg) {
    nest_race *r = (nest_race *)arg;
    cpool_stream *s = NULL;
    if (!CHECK_OK(cpool_stream_create(r->dev, &s))) return NULL;
    while (!aload(&r->stop)) {
        nest_ctx c = {r->pool, 6 * MiB, 0x77, NULL};
        cpool_graph *g = NULL;
        cpool_status st = cpool_capture(s, r->pool, CPOOL_CAPTURE_RELAXED, body_nest, &c, &g);
        if (st == CPOOL_OK) {
            cpool_status launched = cpool_graph_launch(g, s);
            if (launched == CPOOL_OK) {
                CHECK_OK(cpool_stream_synchronize(s));
                astore(&r->captures, r->captures + 1); /* this thread alone writes it */
            } else {
                CHECK_STATUS(launched, CPOOL_ERR_SUSPENDED);
            }
            cpool_graph_release(g);
        } else {
            CHECK_STATUS(st, CPOOL_ERR_SUSPENDED);
            sleep_ms(1);
        }
        if (c.out) CHECK_OK(cpool_free(r->pool, c.out, s));
        CHECK_OK(cpool_stream_synchronize(s));
    }
    cpool_stream_destroy(s);
    return NULL;
}

static void nested_graphs_race_suspend_launch_and_capture(cpool_device *dev) {
    static nest_race r;
    memset(&r, 0, sizeof r);
    r.dev = dev;
    cpool_stream *s;
    REQUIRE_OK(cpool_stream_create(dev, &s));
    REQUIRE_OK(cpool_pool_create(dev, NULL, &r.pool));
    nest_ctx c[NEST_GRAPHS];
    for (int i = 0; i < NEST_GRAPHS; i++) {
        c[i] = (nest_ctx){r.pool, (size_t)(4 + 4 * i) * MiB, 0x41 + i, NULL};
        REQUIRE_OK(cpool_capture(s, r.pool, CPOOL_CAPTURE_GLOBAL, body_nest, &c[i], &r.g[i]));
    }
    pthread_t t[3];
    void *(*fn[3])(void *) = {nest_suspender, nest_launcher, nest_capturer};
    int started = 0;
    for (; started < 3; started++)
        if (pthread_create(&t[started], NULL, fn[started], &r) != 0) break;
    CHECK_EQ(started, 3);
    if (started < 3) astore(&r.stop, 1);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    printf("  %d suspends, %d launches, %d captures launched\n", r.suspends, r.launches, r.captures);
    CHECK_GE(r.suspends, NEST_ROUNDS);
    CHECK(!cpool_pool_is_suspended(r.pool));
    for (int i = 0; i < NEST_GRAPHS; i++) CHECK_OK(cpool_graph_launch(r.g[i], s));
    for (int i = 0; i < NEST_GRAPHS; i++) CHECK_BYTES(s, c[i].out, 16 * KiB, c[i].fill);
    for (int i = 0; i < NEST_GRAPHS; i++) {
        cpool_graph_release(r.g[i]);
        CHECK_OK(cpool_free(r.pool, c[i].out, s));
    }
    CHECK_OK(cpool_stream_synchronize(s));
    CHECK_OK(cpool_pool_trim(r.pool));
    cpool_pool_release(r.pool);
    cpool_stream_destroy(s);
}

static const check_case cases[] = {
    CHECK_CASE(keep_contents_brings_every_live_byte_back),
    CHECK_CASE(graph_first_launched_after_resume),
    CHECK_CASE(suspend_waits_for_running_work),
    CHECK_CASE(host_buffer_follows_the_live_bytes),
    CHECK_CASE(only_live_bytes_are_kept),
    CHECK_CASE(discard_keeps_addresses_not_bytes),
    CHECK_CASE(while_suspended_only_memory_calls_are_refused),
    CHECK_CASE(resume_without_suspend_changes_nothing),
    CHECK_CASE(suspend_refused_while_a_capture_uses_the_pool),
    CHECK_CASE(suspend_and_resume_refused_in_a_stream_callback),
    CHECK_CASE(bad_arguments_are_refused),
    CHECK_CASE(plain_segments_are_unsupported),
    CHECK_CASE(snapshot_of_a_suspended_pool),
    CHECK_CASE(param_set_refused_while_suspended),
    CHECK_CASE(graphs_holding_a_suspended_pool_are_refused),
    CHECK_CASE(free_and_trim_while_suspended_then_resume),
    CHECK_CASE(last_release_while_suspended),
    CHECK_CASE(graphs_released_while_suspended),
    CHECK_CASE(suspend_and_resume_race_with_the_pools_users),
    CHECK_CASE(nested_graphs_race_suspend_launch_and_capture),
    CHECK_CASE(frees_and_clears_race_with_suspend),
    /* Last: where the library runs the copy on memory given back, the
     * process ends there, after every other case has reported. */
    CHECK_CASE(copy_during_a_suspend_is_refused_or_waited_for),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
