/*
 * A pool attached to a capture begun outside the library
 * (cpool_capture_attach, cpool_capture_detach), as PyTorch's
 * torch.cuda.graph begins one with cudaStreamBeginCapture.
 *
 * "Someone else's" capture is begun, ended and launched here through the
 * device's backend table, as the CUDA runtime would be called directly:
 * on the host backend a stream captures no other way. Hence the static
 * library and its internal headers.
 *
 * Checked: allocations under the attached capture are graph memory (the
 * scratch shares pages with the pool's other graphs, C graphs included;
 * blocks live at the detach get pages of their own), the hold counts as a
 * graph until released, outputs are never overwritten by other graphs'
 * replays (on the host backend graph pages are one memfd mapped at several
 * addresses, so a shared page would show another graph's bytes), streams
 * forked into the capture allocate there too, and the misuses are refused
 * with the statuses capturepool.h names.
 */
#include "check.h"
#include "helpers.h"
#include "internal.h" /* the device's backend table */

#define KiB ((size_t)1024)
#define MiB ((size_t)1024 * 1024)
#define PAGE_BYTES (2 * MiB)

/* ---- a capture the library did not begin -------------------------------------- */

typedef struct foreign {
    cpool_stream *s; /* the handle */
    cpool__bevent *fence;
    cpool__bgraph *graph;
} foreign;

static cpool_stream *stream_object(cpool_stream *handle) {
    return (cpool_stream *)cpool__handle_object(handle, CPOOL__HANDLE_STREAM);
}

static cpool_status foreign_begin(foreign *f, cpool_stream *s_handle) {
    cpool_stream *s = stream_object(s_handle);
    memset(f, 0, sizeof *f);
    f->s = s_handle;
    cpool_status st = s->dev->be->event_create(s->dev->impl, &f->fence);
    return st == CPOOL_OK ? s->dev->be->capture_begin(s->impl, CPOOL_CAPTURE_GLOBAL, f->fence) : st;
}

static cpool_status foreign_end(foreign *f) {
    cpool_stream *s = stream_object(f->s);
    return s->dev->be->capture_end(s->impl, true, &f->graph);
}

static cpool_status foreign_launch(foreign *f, cpool_stream *on) {
    cpool_stream *s = stream_object(on);
    return s->dev->be->graph_launch(f->graph, s->impl);
}

/* The owner destroys its graph (after its last replay, which the caller
 * synchronized). */
static void foreign_destroy(foreign *f, cpool_device *dev) {
    const cpool__backend *be = ((cpool_device *)cpool__handle_object(dev, CPOOL__HANDLE_DEVICE))->be;
    if (f->graph) be->graph_destroy(f->graph);
    if (f->fence) be->event_destroy(f->fence);
    f->graph = NULL;
    f->fence = NULL;
}

/* The work of one graph: scratch filled with `value`, copied into the
 * output, the scratch freed. */
static cpool_status scratch_to_output(cpool_pool *pool, cpool_stream *s, size_t scratch_bytes, void *out,
                                      size_t out_bytes, unsigned char value) {
    void *scratch = NULL;
    cpool_status st = cpool_alloc(pool, scratch_bytes, s, &scratch);
    if (st == CPOOL_OK) st = cpool_memset_async(s, scratch, value, scratch_bytes);
    if (st == CPOOL_OK) st = cpool_memcpy_async(s, out, scratch, out_bytes);
    if (scratch) {
        cpool_status fst = cpool_free(pool, scratch, s);
        if (st == CPOOL_OK) st = fst;
    }
    return st;
}

/* One foreign graph in `pool` on s: attach, an output of out_bytes (with
 * cpool_alloc_output when `output`), scratch, detach, end. */
static int capture_attached(cpool_device *dev, cpool_stream *s, cpool_pool *pool, size_t scratch_bytes,
                            size_t out_bytes, int output, unsigned char value, foreign *f, void **out,
                            cpool_graph **hold) {
    (void)dev;
    *out = NULL;
    *hold = NULL;
    if (!CHECK_OK(foreign_begin(f, s))) return 0;
    if (!CHECK_OK(cpool_capture_attach(s, pool))) return 0;
    int ok = output ? CHECK_OK(cpool_alloc_output(pool, out_bytes, s, out))
                    : CHECK_OK(cpool_alloc(pool, out_bytes, s, out));
    ok = ok && CHECK_OK(scratch_to_output(pool, s, scratch_bytes, *out, out_bytes, value));
    ok = CHECK_OK(cpool_capture_detach(s, hold)) && ok;
    ok = CHECK_OK(foreign_end(f)) && ok;
    return ok;
}

static cpool_status nothing_to_do(cpool_stream *s, void *ctx) {
    (void)s;
    (void)ctx;
    return CPOOL_OK;
}

/* ---- cases ------------------------------------------------------------------------ */

static void attach_serves_scratch_and_outputs(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    foreign f;
    REQUIRE_OK(foreign_begin(&f, fx.s));
    REQUIRE_OK(cpool_capture_attach(fx.s, fx.pool));
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(fx.s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
    /* The capture is its owner's; a second attach or begin is refused. */
    cpool_graph *g = NULL;
    CHECK_STATUS(cpool_capture_end(fx.s, &g), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK(g == NULL);
    CHECK_STATUS(cpool_capture_attach(fx.s, fx.pool), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_STATUS(cpool_capture_begin(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
    /* While attached the capture holds the pool: no suspend. */
    CHECK_STATUS(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT);

    void *out = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 64 * KiB, fx.s, &out));
    REQUIRE_OK(scratch_to_output(fx.pool, fx.s, 3 * MiB, out, 64 * KiB, 0x5a));
    cpool_pool_stats st = stats_of(fx.pool);
    CHECK_GE(st.graph_reserved_bytes, 3 * MiB);
    CHECK_EQ(st.graph_count, 0u); /* a capture, not a graph yet */

    cpool_graph *hold = NULL;
    REQUIRE_OK(cpool_capture_detach(fx.s, &hold));
    REQUIRE(hold != NULL);
    CHECK_OK(cpool_capture_status(fx.s, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE); /* still its owner's */
    CHECK_STATUS(cpool_capture_detach(fx.s, &g), CPOOL_ERR_NOT_CAPTURING);
    st = stats_of(fx.pool);
    CHECK_EQ(st.graph_count, 1u);
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    CHECK_OK(cpool_graph_get_stats(hold, &gs));
    CHECK_EQ(gs.live_outputs, 1u);
    CHECK_EQ(gs.live_output_bytes, 64 * KiB);
    CHECK_GE(gs.own_bytes, 64 * KiB);
    CHECK_GE(gs.shared_write_bytes, 2 * MiB);
    CHECK(cpool_graph_pool(hold) == fx.pool);
    CHECK(cpool_graph_native(hold) == NULL);
    CHECK_NE(cpool_graph_id(hold), 0u);
    /* No executable: whatever needs one refuses. */
    CHECK_STATUS(cpool_graph_launch(hold, fx.s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_upload(hold, fx.s), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_graph_dump_dot(hold, "/dev/null"), CPOOL_ERR_INVALID_ARGUMENT);

    REQUIRE_OK(foreign_end(&f));
    CHECK_OK(foreign_launch(&f, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_BYTES(fx.s, out, 64 * KiB, 0x5a);
    CHECK_STATUS(cpool_graph_update(hold, fx.s, nothing_to_do, NULL), CPOOL_ERR_INVALID_ARGUMENT);

    /* The hold counts as a graph: a suspend takes its memory, the resume
     * maps it back at its addresses, and the owner's graph replays there. */
    CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD));
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_OK(cpool_memset_async(fx.s, out, 0, 64 * KiB));
    CHECK_OK(foreign_launch(&f, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_BYTES(fx.s, out, 64 * KiB, 0x5a);

    foreign_destroy(&f, dev);
    cpool_graph_release(hold);
    CHECK_EQ(stats_of(fx.pool).graph_count, 0u);
    cpool_graph_release(hold); /* twice: refused, with the reason */
    CHECK(strstr(cpool_last_error(), "dead") != NULL);
    CHECK_OK(cpool_free(fx.pool, out, fx.s));
    cpool__pool_check(fx.pool);
}

enum { BATCHES = 4 };

/* Graphs per batch size, captured by their owner and attached, beside a
 * graph captured by the library: the scratch shares pages, so graph memory
 * is about the largest scratch plus the outputs' pages, and no replay
 * overwrites another graph's output. */
static void attached_graphs_share_pages(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    foreign f[BATCHES];
    void *out[BATCHES + 1] = {0};
    cpool_graph *hold[BATCHES] = {0};
    size_t out_bytes = 64 * KiB, largest = 0, sum = 0;
    for (int k = 0; k < BATCHES; k++) {
        size_t scratch = (size_t)(k + 1) * 3 * MiB;
        REQUIRE(capture_attached(dev, fx.s, fx.pool, scratch, out_bytes, k % 2, (unsigned char)(0x40 + k), &f[k],
                                 &out[k], &hold[k]));
        if (scratch > largest) largest = scratch;
        sum += scratch;
    }
    /* A C graph in the same pool, scratch as large as the largest. */
    cpool_graph *c = NULL;
    REQUIRE_OK(cpool_capture_begin(fx.s, fx.pool, CPOOL_CAPTURE_GLOBAL));
    REQUIRE_OK(cpool_alloc(fx.pool, out_bytes, fx.s, &out[BATCHES]));
    REQUIRE_OK(scratch_to_output(fx.pool, fx.s, largest, out[BATCHES], out_bytes, 0x4f));
    REQUIRE_OK(cpool_capture_end(fx.s, &c));

    cpool_pool_stats st = stats_of(fx.pool);
    uint64_t bound = (largest + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES + (BATCHES + 1) * PAGE_BYTES;
    printf("  graph_reserved_bytes %.2f MiB: largest scratch %.2f MiB, all scratch %.2f MiB, bound %.2f MiB\n",
           (double)st.graph_reserved_bytes / MiB, (double)largest / MiB, (double)sum / MiB, (double)bound / MiB);
    CHECK_LE(st.graph_reserved_bytes, bound);
    CHECK_LT(st.graph_reserved_bytes, sum + largest);
    CHECK_EQ(st.graph_count, (uint64_t)BATCHES + 1);

    /* Every graph once in capture order, then backwards, then the C graph
     * between each: after each launch every output holds its own bytes. */
    int order[3 * BATCHES + BATCHES];
    int n = 0;
    for (int k = 0; k < BATCHES; k++) order[n++] = k;
    for (int k = BATCHES; k-- > 0;) order[n++] = k;
    for (int k = 0; k < BATCHES; k++) {
        order[n++] = BATCHES; /* the C graph */
        order[n++] = k;
    }
    int written[BATCHES + 1] = {0};
    for (int i = 0; i < n; i++) {
        int g = order[i];
        if (g == BATCHES)
            CHECK_OK(cpool_graph_launch(c, fx.s));
        else
            CHECK_OK(foreign_launch(&f[g], fx.s));
        written[g] = 1;
        CHECK_OK(cpool_stream_synchronize(fx.s));
        for (int k = 0; k <= BATCHES; k++)
            if (written[k]) CHECK_BYTES(fx.s, out[k], out_bytes, k == BATCHES ? 0x4f : 0x40 + k);
    }
    for (int k = 0; k < BATCHES; k++) {
        foreign_destroy(&f[k], dev);
        cpool_graph_release(hold[k]);
    }
    cpool_graph_release(c);
    CHECK_EQ(stats_of(fx.pool).graph_count, 0u);
    for (int k = 0; k <= BATCHES; k++) CHECK_OK(cpool_free(fx.pool, out[k], fx.s));
    cpool__pool_check(fx.pool);
}

/* As PyTorch's caching allocator does: one segment (one block of the
 * pool) holds a graph's output (its first MiB) and scratch (the rest,
 * freed inside torch, not to the pool). Noted as scratch, the segment's
 * whole pages past the output stay shared: a second graph's scratch maps
 * them, and the output keeps its bytes through both graphs' replays. */
static void segment_scratch_stays_shared(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    foreign f[2];
    void *seg = NULL, *out2 = NULL;
    cpool_graph *hold[2] = {NULL, NULL};
    /* Graph 0: an 8 MiB segment, output in its first MiB. */
    REQUIRE_OK(foreign_begin(&f[0], fx.s));
    REQUIRE_OK(cpool_capture_attach(fx.s, fx.pool));
    REQUIRE_OK(cpool_alloc(fx.pool, 8 * MiB, fx.s, &seg));
    CHECK_OK(cpool_memset_async(fx.s, (char *)seg + MiB, 0x11, 7 * MiB)); /* scratch */
    CHECK_OK(cpool_memcpy_async(fx.s, seg, (char *)seg + MiB, MiB));     /* the output, from it */
    CHECK_STATUS(cpool_capture_note_scratch(fx.s, fx.pool, seg, MiB, 8 * MiB), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_note_scratch(fx.s, fx.pool, (char *)seg + MiB, 0, MiB), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(cpool_capture_note_scratch(fx.s, fx.pool, NULL, 0, MiB), CPOOL_ERR_INVALID_ARGUMENT);
    CHECK_OK(cpool_capture_note_scratch(fx.s, fx.pool, seg, MiB, 7 * MiB));
    CHECK_OK(cpool_capture_detach(fx.s, &hold[0]));
    CHECK_OK(foreign_end(&f[0]));
    CHECK_STATUS(cpool_capture_note_scratch(fx.s, fx.pool, seg, MiB, 7 * MiB), CPOOL_ERR_NOT_CAPTURING);
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    REQUIRE_OK(cpool_graph_get_stats(hold[0], &gs));
    CHECK_EQ(gs.own_bytes, (uint64_t)PAGE_BYTES); /* the output's page alone */
    /* Graph 1: 6 MiB of scratch of its own, a 64 KiB output. */
    REQUIRE(capture_attached(dev, fx.s, fx.pool, 6 * MiB, 64 * KiB, 0, 0x22, &f[1], &out2, &hold[1]));
    cpool_pool_stats st = stats_of(fx.pool);
    printf("  graph_reserved_bytes %.0f MiB for an 8 MiB segment and 6 MiB of scratch\n",
           (double)st.graph_reserved_bytes / MiB);
    CHECK_LE(st.graph_reserved_bytes, 10 * MiB); /* 3 shared pages, 2 own (else 8 + 6 + 2 MiB) */
    for (int round = 0; round < 3; round++) {
        CHECK_OK(foreign_launch(&f[round % 2], fx.s));
        CHECK_OK(foreign_launch(&f[(round + 1) % 2], fx.s));
        CHECK_OK(cpool_stream_synchronize(fx.s));
        CHECK_BYTES(fx.s, seg, MiB, 0x11);
        CHECK_BYTES(fx.s, out2, 64 * KiB, 0x22);
    }
    for (int k = 0; k < 2; k++) {
        foreign_destroy(&f[k], dev);
        cpool_graph_release(hold[k]);
    }
    CHECK_OK(cpool_free(fx.pool, seg, fx.s));
    CHECK_OK(cpool_free(fx.pool, out2, fx.s));
    cpool__pool_check(fx.pool);
}

/* A stream forked into the attached capture by an event allocates there
 * too; it is joined back before the owner ends it. */
static void forked_stream_allocates_in_the_capture(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    static cpool_stream *side;
    static cpool_event *fork_ev, *join_ev;
    REQUIRE_OK(cpool_stream_create(dev, &side));
    REQUIRE_OK(cpool_event_create(dev, &fork_ev));
    REQUIRE_OK(cpool_event_create(dev, &join_ev));
    foreign f;
    REQUIRE_OK(foreign_begin(&f, fx.s));
    REQUIRE_OK(cpool_capture_attach(fx.s, fx.pool));
    void *out = NULL, *side_out = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 64 * KiB, fx.s, &out));
    REQUIRE_OK(cpool_event_record(fork_ev, fx.s));
    REQUIRE_OK(cpool_stream_wait_event(side, fork_ev));
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(side, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_ACTIVE);
    REQUIRE_OK(cpool_alloc(fx.pool, 64 * KiB, side, &side_out));
    REQUIRE_OK(scratch_to_output(fx.pool, side, 4 * MiB, side_out, 64 * KiB, 0x33));
    cpool_graph *g = NULL;
    CHECK_STATUS(cpool_capture_detach(side, &g), CPOOL_ERR_INVALID_ARGUMENT); /* a fork */
    REQUIRE_OK(cpool_event_record(join_ev, side));
    REQUIRE_OK(cpool_stream_wait_event(fx.s, join_ev));
    REQUIRE_OK(scratch_to_output(fx.pool, fx.s, 4 * MiB, out, 64 * KiB, 0x34));
    cpool_graph *hold = NULL;
    REQUIRE_OK(cpool_capture_detach(fx.s, &hold));
    CHECK_OK(cpool_capture_status(side, &state)); /* the owner ends it */
    REQUIRE_OK(foreign_end(&f));
    CHECK_OK(cpool_capture_status(side, &state));
    CHECK_EQ(state, CPOOL_CAPTURE_NONE);
    cpool_graph_stats gs = {.struct_size = sizeof gs};
    CHECK_OK(cpool_graph_get_stats(hold, &gs));
    CHECK_EQ(gs.live_outputs, 2u);
    CHECK_OK(foreign_launch(&f, fx.s));
    CHECK_OK(cpool_stream_synchronize(fx.s));
    CHECK_BYTES(fx.s, out, 64 * KiB, 0x34);
    CHECK_BYTES(fx.s, side_out, 64 * KiB, 0x33);
    foreign_destroy(&f, dev);
    cpool_graph_release(hold);
    CHECK_OK(cpool_free(fx.pool, out, fx.s));
    CHECK_OK(cpool_free(fx.pool, side_out, fx.s));
    cpool_event_destroy(fork_ev);
    cpool_event_destroy(join_ev);
    cpool_stream_destroy(side);
    cpool__pool_check(fx.pool);
}

static void attach_misuse(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    cpool_graph *g = NULL;
    /* Not capturing. */
    CHECK_STATUS(cpool_capture_attach(fx.s, fx.pool), CPOOL_ERR_NOT_CAPTURING);
    CHECK_STATUS(cpool_capture_detach(fx.s, &g), CPOOL_ERR_NOT_CAPTURING);
    CHECK_STATUS(cpool_capture_detach(fx.s, NULL), CPOOL_ERR_INVALID_ARGUMENT);
    /* A capture of the library's: its pools need no attach, and it is
     * ended with cpool_capture_end. */
    REQUIRE_OK(cpool_capture_begin(fx.s, NULL, CPOOL_CAPTURE_GLOBAL));
    CHECK_STATUS(cpool_capture_attach(fx.s, fx.pool), CPOOL_ERR_ALREADY_CAPTURING);
    CHECK_STATUS(cpool_capture_detach(fx.s, &g), CPOOL_ERR_INVALID_ARGUMENT);
    REQUIRE_OK(cpool_capture_end(fx.s, &g));
    cpool_graph_release(g);
    g = NULL;

    foreign f;
    REQUIRE_OK(foreign_begin(&f, fx.s));
    /* Detach without attach. */
    CHECK_STATUS(cpool_capture_detach(fx.s, &g), CPOOL_ERR_NOT_CAPTURING);
    /* A suspended pool. */
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD));
    CHECK_STATUS(cpool_capture_attach(fx.s, fx.pool), CPOOL_ERR_SUSPENDED);
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    /* Refused attaches changed nothing: the pool suspends (no capture holds
     * it), and an attach now succeeds. */
    REQUIRE_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD));
    REQUIRE_OK(cpool_pool_resume(fx.pool));
    REQUIRE_OK(cpool_capture_attach(fx.s, fx.pool));
    REQUIRE_OK(cpool_capture_detach(fx.s, &g));
    REQUIRE_OK(foreign_end(&f));
    foreign_destroy(&f, dev);
    cpool_graph_release(g);
    CHECK_EQ(stats_of(fx.pool).graph_count, 0u);

    /* A broken capture is refused; its owner can only end it. */
    REQUIRE_OK(foreign_begin(&f, fx.s));
    cpool_stream *s = stream_object(fx.s);
    (void)s->dev->be->stream_synchronize(s->impl); /* forbidden while capturing */
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    CHECK_OK(cpool_capture_status(fx.s, &state));
    if (state == CPOOL_CAPTURE_INVALIDATED) CHECK_STATUS(cpool_capture_attach(fx.s, fx.pool), CPOOL_ERR_CAPTURE_INVALIDATED);
    CHECK(foreign_end(&f) != CPOOL_OK);
    foreign_destroy(&f, dev);
    cpool__pool_check(fx.pool);
}

/* The stream is destroyed while attached: the attachment is dropped with
 * its memory, and the pool is held by nothing. */
static void stream_destroyed_while_attached(cpool_device *dev) {
    static stream_pool fx;
    REQUIRE(fixture_open(dev, NULL, &fx));
    cpool_stream *s2 = NULL;
    REQUIRE_OK(cpool_stream_create(dev, &s2));
    foreign f;
    REQUIRE_OK(foreign_begin(&f, s2));
    REQUIRE_OK(cpool_capture_attach(s2, fx.pool));
    void *p = NULL;
    REQUIRE_OK(cpool_alloc(fx.pool, 3 * MiB, s2, &p));
    cpool_stream_destroy(s2);
    foreign_destroy(&f, dev);
    CHECK_EQ(stats_of(fx.pool).graph_count, 0u);
    CHECK_OK(cpool_pool_suspend(fx.pool, CPOOL_SUSPEND_DISCARD)); /* no capture holds it */
    CHECK_OK(cpool_pool_resume(fx.pool));
    CHECK_OK(cpool_free(fx.pool, p, fx.s)); /* a plain block now */
    cpool__pool_check(fx.pool);
}

static const check_case cases[] = {
    CHECK_CASE(attach_serves_scratch_and_outputs),
    CHECK_CASE(attached_graphs_share_pages),
    CHECK_CASE(segment_scratch_stays_shared),
    CHECK_CASE(forked_stream_allocates_in_the_capture),
    CHECK_CASE(attach_misuse),
    CHECK_CASE(stream_destroyed_while_attached),
};

CHECK_MAIN(cases, CHECK_ON_ALL)
