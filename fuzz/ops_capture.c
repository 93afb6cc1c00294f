/*
 * ops_capture.c: the fuzz_api harness's captures and graphs (declared in
 * ops.h and ops_internal.h): explicit captures (op_capture_begin,
 * op_capture_end), scoped ones and graphed calls with a body that runs a
 * script of steps (op_scoped, body_fn, body_step), graph updates, launches,
 * uploads, retains and releases, an eager block freed under capture
 * (op_eager_free), a bounded pool under capture (op_bounded_capture), and
 * forks and joins of a multi-stream capture (op_fork).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: capture and graphs ------------------------------------------------ */

static cpool_capture_mode decode_mode(uint8_t v, bool *bad) {
    *bad = v % 4 == 3;
    return *bad ? (cpool_capture_mode)7 : (cpool_capture_mode)(v % 4);
}

/* Whether graph g holds a pool that is suspended now. */
static bool holds_suspended(const mgraph *g) {
    for (int i = 0; i < g->nh; i++)
        if (P[g->h[i].pool].state == SLOT_LIVE && P[g->h[i].pool].suspended) return true;
    return g->bound >= 0 && P[g->bound].state == SLOT_LIVE && P[g->bound].suspended;
}


void op_capture_begin(rd *r, int s) {
    uint8_t pv = u8(r), mv = u8(r);
    int pi = pv % 5 == 4 ? -1 : pick_pool(pv);
    bool bad;
    cpool_capture_mode mode = decode_mode(mv, &bad);
    TRACE("capture_begin stream %d pool %d mode %d\n", s, pi >= 0 ? (int)P[pi].uid : -1, (int)mode);
    cpool_status st = cpool_capture_begin(S[s], pi >= 0 ? P[pi].p : NULL, mode);
    if (bad && C[s].active)
        expect_one_of(st, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_ALREADY_CAPTURING, "cpool_capture_begin");
    else if (bad)
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_begin (bad mode)", true);
    else if (C[s].active)
        check_status(st, CPOOL_ERR_ALREADY_CAPTURING, "cpool_capture_begin (capturing already)", true);
    else if (pi >= 0 && P[pi].suspended)
        check_status(st, CPOOL_ERR_SUSPENDED, "cpool_capture_begin (a suspended pool)", true);
    else
        check_status(st, CPOOL_OK, "cpool_capture_begin", true);
    if (st == CPOOL_OK) model_capture_begin(s, pi, mode);
}

/* Whether a pool of the capture's holds has a bound (max_reserved): its
 * end may then find no room for the outputs' pages. */
static bool any_bounded(const held *h, int nh) {
    for (int i = 0; i < nh; i++)
        if (P[h[i].pool].max_reserved != 0) return true;
    return false;
}

void do_capture_end(int s) {
    cpool_graph *g = (cpool_graph *)&G;
    if (fork_of[s] >= 0) { /* ends only on its origin */
        EXPECT(cpool_capture_end(S[s], &g), CPOOL_ERR_INVALID_ARGUMENT);
        if (g) fail("cpool_capture_end on a fork left *graph_out set");
        return;
    }
    if (!C[s].active) {
        EXPECT(cpool_capture_end(S[s], &g), CPOOL_ERR_NOT_CAPTURING);
        if (g) fail("cpool_capture_end failed and left *graph_out set");
        return;
    }
    TRACE("capture_end stream %d%s\n", s, C[s].invalidated ? " (invalidated)" : C[s].unjoined ? " (a fork unjoined)" : "");
    before_blocking();
    if (C[s].invalidated || C[s].unjoined) {
        capture_drop(s, true);
        EXPECT(cpool_capture_end(S[s], &g), CPOOL_ERR_CAPTURE_INVALIDATED);
        if (g) fail("cpool_capture_end failed and left *graph_out set");
        run_verifies();
        return;
    }
    /* In a bounded pool the end may find no room for the pages of the
     * graph's outputs: the capture fails as any failed end does. */
    bool bounded = any_bounded(C[s].h, C[s].nh);
    if (bounded) end_may_drop(C[s].h, C[s].nh);
    cpool_status st = cpool_capture_end(S[s], &g);
    end_settled(st == CPOOL_OK);
    if (st == CPOOL_ERR_OUT_OF_MEMORY && bounded) {
        if (g) fail("cpool_capture_end failed and left *graph_out set");
        capture_drop(s, true);
        run_verifies();
        return;
    }
    mgraph m = graph_from_capture(s);
    check_status(st, CPOOL_OK, "cpool_capture_end(S[s], &g)", true);
    if (!g) fail("cpool_capture_end succeeded with a NULL graph");
    graph_store(&m, g);
}

void op_capture_end(rd *r, int s) {
    uint8_t v = u8(r);
    if (v % 8 == 0) { /* NULL graph_out: refused, the capture goes on */
        EXPECT(cpool_capture_end(S[s], NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    do_capture_end(s);
}

/* Body of cpool_capture, cpool_graphed_call and cpool_graph_update: a
 * script of operations on its stream. */
typedef struct body_ctx {
    const uint8_t *script;
    size_t len;
    int s, pool, warmup, fail_at, update_graph;
    cpool_capture_mode mode;
    cpool_status ret;
    int calls;
    bool began, eager_failed, captured_failed, invalidated;
    mgraph fresh;
} body_ctx;

static void body_step(rd *r, int s);

static cpool_status body_fn(cpool_stream *str, void *vctx) {
    body_ctx *c = vctx;
    int s = c->s;
    if (str != S[s]) fail("the body runs with another stream");
    int idx = c->calls++;
    bool captured = idx == c->warmup;
    if (captured) {
        if (C[s].active) fail("the body runs as the capture, but the stream was capturing before");
        model_capture_begin(s, c->pool, c->mode);
        c->began = true;
    }
    check_all();
    rd r = {c->script, c->len};
    while (r.n) {
        body_step(&r, s);
        check_all();
    }
    cpool_status ret = idx == c->fail_at ? c->ret : CPOOL_OK;
    TRACE("body call %d returns %d\n", idx, (int)ret);
    if (!captured) {
        if (ret != CPOOL_OK) c->eager_failed = true;
        return ret;
    }
    /* What happens once the body returns (may drop pools). */
    before_blocking();
    c->captured_failed = ret != CPOOL_OK;
    c->invalidated = C[s].invalidated || C[s].unjoined;
    if (ret != CPOOL_OK || c->invalidated) {
        capture_drop(s, true);
    } else if (c->update_graph < 0) {
        c->fresh = graph_from_capture(s);
        if (any_bounded(c->fresh.h, c->fresh.nh))
            end_may_drop(c->fresh.h, c->fresh.nh); /* its end may fail (op_scoped) */
    } else {
        /* cpool_graph_update: the graph takes the new capture's references
         * and the old ones go with the discarded executable. */
        mgraph *g = &G[c->update_graph];
        mgraph fresh = graph_from_capture(s);
        held old[NPOOL];
        int nold = g->nh;
        memcpy(old, g->h, sizeof old);
        memcpy(g->h, fresh.h, sizeof g->h);
        g->nh = fresh.nh;
        g->tk = fresh.tk;
        g->ticks = fresh.ticks;
        g->cap_id = fresh.cap_id;
        g->known_stale = false;
        graph_pools_released(old, nold, true);
    }
    return ret;
}

static const cpool_status body_failures[4] = {CPOOL_ERR_BACKEND, CPOOL_ERR_OUT_OF_MEMORY, CPOOL_ERR_INVALID_ARGUMENT,
                                              (cpool_status)77};

static void read_script(rd *r, body_ctx *c) {
    size_t len = u8(r) % (MAX_BODY + 1);
    if (len > r->n) len = r->n;
    c->script = r->p;
    c->len = len;
    r->p += len;
    r->n -= len;
}

void op_scoped(rd *r, int s) {
    uint8_t v = u8(r), pv = u8(r), fv = u8(r);
    body_ctx c;
    memset(&c, 0, sizeof c);
    read_script(r, &c);
    bool graphed = v & 1;
    bool bad_mode;
    c.s = s;
    c.pool = pv % 5 == 4 ? -1 : pick_resident_pool(pv);
    c.mode = decode_mode(v >> 3, &bad_mode);
    c.warmup = graphed ? (int)((v >> 1) % 4) - 1 : 0;
    c.fail_at = fv % 4 == 3 ? -1 : (c.warmup >= 0 ? (int)(fv % (unsigned)(c.warmup + 1)) : 0);
    c.ret = body_failures[(fv >> 2) % 4];
    c.update_graph = -1;
    bool was_capturing = C[s].active;
    TRACE("%s stream %d pool %d mode %d warmup %d fail_at %d script %zu bytes\n", graphed ? "graphed_call" : "capture", s,
          c.pool >= 0 ? (int)P[c.pool].uid : -1, (int)c.mode, c.warmup, c.fail_at, c.len);
    before_blocking();
    cpool_graph *g = (cpool_graph *)&G;
    cpool_pool *pool = c.pool >= 0 ? P[c.pool].p : NULL;
    cpool_status st = graphed ? cpool_graphed_call(S[s], pool, c.mode, c.warmup, body_fn, &c, &g)
                              : cpool_capture(S[s], pool, c.mode, body_fn, &c, &g);
    end_settled(st == CPOOL_OK);
    const char *what = graphed ? "cpool_graphed_call" : "cpool_capture";
    if (graphed && c.warmup < 0) {
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_graphed_call (negative warmup)", true);
        if (c.calls) fail("cpool_graphed_call ran the body with a negative warmup count");
    } else if (c.eager_failed) {
        check_status(st, c.ret, "cpool_graphed_call (the body failed eagerly)", false);
        if (c.began) fail("cpool_graphed_call captured after an eager run failed");
    } else if (bad_mode && was_capturing) {
        expect_one_of(st, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_ALREADY_CAPTURING, what);
        if (c.began) fail("%s ran the captured body although the capture could not begin", what);
    } else if (bad_mode || was_capturing) {
        check_status(st, bad_mode ? CPOOL_ERR_INVALID_ARGUMENT : CPOOL_ERR_ALREADY_CAPTURING, what, true);
        if (c.began) fail("%s ran the captured body although the capture could not begin", what);
    } else {
        if (!c.began) fail("%s returned %s without running the body under capture", what, cpool_status_string(st));
        /* In a bounded pool the end may find no room for the pages of the
         * graph's outputs: the capture fails as any failed end does (see
         * do_capture_end), and the graph the model made never was. */
        bool bounded = any_bounded(c.fresh.h, c.fresh.nh);
        if (c.captured_failed) {
            check_status(st, c.ret, "cpool_capture (the body failed)", false);
        } else if (c.invalidated) {
            check_status(st, CPOOL_ERR_CAPTURE_INVALIDATED, what, true);
        } else if (bounded && st == CPOOL_ERR_OUT_OF_MEMORY) {
            TRACE("%s: no room for the outputs' pages in a bounded pool\n", what);
            graph_pools_released(c.fresh.h, c.fresh.nh, true);
        } else {
            check_status(st, CPOOL_OK, what, true);
        }
    }
    if (st != CPOOL_OK && g) fail("%s failed and left *graph_out set", what);
    run_verifies();
    if (st == CPOOL_OK) graph_store(&c.fresh, g);
}

void op_update(rd *r, int s) {
    uint8_t b = u8(r), fv = u8(r);
    body_ctx c;
    memset(&c, 0, sizeof c);
    read_script(r, &c);
    int gi = pick_graph(b);
    if (gi < 0) return;
    mgraph *g = &G[gi];
    if (holds_suspended(g)) return; /* its new capture would use a suspended pool */
    /* In a bounded pool the update's end may find no room for the pages of
     * the new outputs, after the body (where the model moves the graph's
     * holds to the new capture, before the library may drop pools) has
     * returned: that failure is not modelled, so no update runs while a
     * bounded pool lives (do_capture_end and op_capture model it). */
    for (int i = 0; i < NPOOL; i++)
        if (P[i].state != SLOT_FREE && P[i].max_reserved) return;
    c.s = s;
    c.pool = g->bound;
    c.mode = g->mode;
    c.warmup = 0;
    c.fail_at = fv % 4 == 3 ? -1 : 0;
    c.ret = body_failures[(fv >> 2) % 4];
    c.update_graph = gi;
    TRACE("graph_update graph %d on stream %d fail %d script %zu bytes\n", gi, s, c.fail_at, c.len);
    if (C[s].active) {
        EXPECT(cpool_graph_update(g->g, S[s], body_fn, &c), CPOOL_ERR_INVALID_ARGUMENT);
        if (c.calls) fail("cpool_graph_update ran the body on a capturing stream");
        return;
    }
    uint64_t replays = g->replays;
    cpool_graph *handle = g->g;
    before_blocking();
    cpool_status st = cpool_graph_update(handle, S[s], body_fn, &c);
    if (!c.began) fail("cpool_graph_update returned %s without capturing the body", cpool_status_string(st));
    if (c.captured_failed)
        check_status(st, c.ret, "cpool_graph_update (the body failed)", false);
    else if (c.invalidated)
        check_status(st, CPOOL_ERR_CAPTURE_INVALIDATED, "cpool_graph_update", true);
    else
        check_status(st, CPOOL_OK, "cpool_graph_update", true);
    run_verifies();
    if (cpool_graph_replays(handle) != replays) fail("cpool_graph_update changed the replay count");
    if (cpool_graph_pool(handle) != (g->bound >= 0 ? P[g->bound].p : NULL)) fail("cpool_graph_update changed the pool");
}

int staleness(const mgraph *g) {
    if (g->known_stale) return STALE;
    int r = FRESH;
    for (int i = 0; i < g->nh; i++) {
        const mpool *m = &P[g->h[i].pool];
        if (g->h[i].hi < m->gen) return STALE;
        if (g->h[i].lo != g->h[i].hi || m->pending_clears || g->h[i].lo != m->gen || nest_risk(m)) r = MAYBE;
    }
    return r;
}

/* ---- launches of graphs that share a pool, ordered ------------------------------- */

/* Graphs that share a pool must not run at the same time, nor two launches
 * of one graph (capturepool.h, "Graphs that share a pool"; GUIDE.md rule 1):
 * their scratch is on the same pages. The caller orders them, so the harness
 * does: after each launch on a stream it records an event of its own there
 * (launch_ev), and a launch on another stream of a graph holding one of the
 * same pool slots first waits for it, the model told as op_event_wait tells
 * it. Launches of graphs of disjoint pools stay unordered. Eager writes to a
 * graph's outputs (op_memset) are ordered the same way against its replays,
 * which write them too. */
static cpool_event *launch_ev[NS];
static uint64_t launch_gates[NS][NS], launch_marks[NS][NS]; /* launch_ev's record, as mevent's */
static unsigned launch_pools[NS]; /* pool slots of the launches before launch_ev's record */

static unsigned graph_pool_slots(const mgraph *g) {
    unsigned mask = 0;
    for (int i = 0; i < g->nh; i++) mask |= 1u << g->h[i].pool;
    if (g->bound >= 0) mask |= 1u << g->bound;
    return mask;
}

void order_pool_work(unsigned mask, int s) {
    for (int t = 0; t < NS; t++) {
        if (t == s || !(launch_pools[t] & mask)) continue;
        TRACE("stream %d waits for the launches on stream %d (graphs sharing a pool)\n", s, t);
        EXPECT_OK(cpool_stream_wait_event(S[s], launch_ev[t]));
        for (int x = 0; x < NS; x++) {
            if (launch_gates[t][x] > dep_gate[s][x]) dep_gate[s][x] = launch_gates[t][x];
            if (launch_marks[t][x] > dep_mark[s][x]) dep_mark[s][x] = launch_marks[t][x];
        }
    }
}

void note_pool_work(unsigned mask, int s) {
    if (!launch_ev[s]) EXPECT_OK(cpool_event_create(dev, &launch_ev[s]));
    EXPECT_OK(cpool_event_record(launch_ev[s], S[s]));
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS; x++) {
        launch_gates[s][x] = x == s ? gate_closed[s] : dep_gate[s][x];
        launch_marks[s][x] = x == s ? enq[s] : dep_mark[s][x];
    }
    pthread_mutex_unlock(&gate_mu);
    launch_pools[s] |= mask;
}

/* The temporary stream is gone, its work done (events_temp_gone). */
void launches_temp_gone(void) {
    launch_pools[TEMP] = 0;
    for (int x = 0; x < NS; x++) launch_gates[x][TEMP] = launch_marks[x][TEMP] = launch_gates[TEMP][x] =
        launch_marks[TEMP][x] = 0;
}

/* At the end of an input, with destroy_events (waits on them still hold). */
void destroy_launch_events(void) {
    for (int s = 0; s < NS; s++)
        if (launch_ev[s]) cpool_event_destroy(launch_ev[s]);
    memset(launch_ev, 0, sizeof launch_ev);
    memset(launch_gates, 0, sizeof launch_gates);
    memset(launch_marks, 0, sizeof launch_marks);
    memset(launch_pools, 0, sizeof launch_pools);
}

void op_launch(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r);
    int gi = pick_graph(b);
    if (gi < 0) return;
    mgraph *g = &G[gi];
    bool upload = v % 4 == 0;
    const char *what = upload ? "cpool_graph_upload" : "cpool_graph_launch";
    TRACE("%s graph %d on stream %d\n", what, gi, s);
    if (C[s].active) {
        check_status(upload ? cpool_graph_upload(g->g, S[s]) : cpool_graph_launch(g->g, S[s]),
                     CPOOL_ERR_INVALID_ARGUMENT, what, true);
        return;
    }
    int e = staleness(g);
    bool suspended = holds_suspended(g);
    /* Graph memory is shared by pages: another graph's live output never
     * refuses a launch (CPOOL_ERR_OUTPUT_LIVE is a failure here). A pool it
     * holds suspended refuses it, or (which pool is looked at first is not
     * said) a stale one. */
    if (!upload) order_pool_work(graph_pool_slots(g), s);
    cpool_status st = upload ? cpool_graph_upload(g->g, S[s]) : cpool_graph_launch(g->g, S[s]);
    if (suspended && e == FRESH)
        check_status(st, CPOOL_ERR_SUSPENDED, what, true);
    else if (suspended)
        expect_one_of(st, CPOOL_ERR_SUSPENDED, CPOOL_ERR_STALE_GRAPH, what);
    else if (e == STALE)
        check_status(st, CPOOL_ERR_STALE_GRAPH, what, true);
    else if (e == FRESH)
        check_status(st, CPOOL_OK, what, true);
    else
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_STALE_GRAPH, what);
    if (st == CPOOL_OK) {
        for (int i = 0; i < g->nh; i++) {
            const mpool *m = &P[g->h[i].pool];
            if (!m->pending_clears && !nest_risk(m)) g->h[i].lo = g->h[i].hi = m->gen;
        }
        if (!upload) {
            g->replays++;
            if (g->tk) g->tk->expected += g->ticks;
            enqueue_marker(s);
            note_pool_work(graph_pool_slots(g), s);
        }
    } else if (st == CPOOL_ERR_STALE_GRAPH) {
        g->known_stale = true;
    }
    if (cpool_graph_replays(g->g) != g->replays)
        fail("graph %d: %llu replays, the model has %llu", gi, (unsigned long long)cpool_graph_replays(g->g),
             (unsigned long long)g->replays);
}

void op_graph_retain(rd *r) {
    int gi = pick_graph(u8(r));
    if (gi < 0) return;
    TRACE("graph_retain %d\n", gi);
    if (cpool_graph_retain(G[gi].g) != G[gi].g) fail("cpool_graph_retain returned another pointer");
    G[gi].refs++;
}

/* Drops one of the harness's references to graph slot gi, model first. */
void release_graph_ref(int gi) {
    cpool_graph *g = G[gi].g;
    bool last = G[gi].refs == 1;
    graph_release_model(gi, true);
    cpool_graph_release(g);
    if (last) push_dead(dead_graphs, &ndead_graphs, g);
    run_verifies();
}

void op_graph_release(rd *r) {
    int gi = pick_graph(u8(r));
    if (gi < 0) return;
    TRACE("graph_release %d (refs %d)\n", gi, G[gi].refs);
    release_graph_ref(gi);
}

/* ---- a body's steps -------------------------------------------------------------- */

static void body_step(rd *r, int s) {
    uint8_t op = u8(r);
    switch (op % 10) {
    case 0:
    case 1:
        op_alloc(r, s);
        break;
    case 2:
        op_free(r, s);
        break;
    case 3:
        do_free_invalid(r, s);
        break;
    case 4:
        op_memset(r, s);
        break;
    case 5:
        op_tick(r, s);
        break;
    case 6:
        op_record(r);
        break;
    case 7:
        TRACE("sync stream %d in a body\n", s);
        do_sync(s);
        break;
    case 8:
        op_seal(r, u8(r) & 1);
        break;
    default:
        op_clear(r);
        break;
    }
}

/* ---- operations: eager frees and bounded pools under capture --------------------- */

/* A block allocated outside capture on s, still used by gated work there,
 * freed inside a capture on s: captures on s and on another stream allocate
 * the same size, and must not get it before the gated work ran (the model's
 * freed ranges check it). */
void op_eager_free(rd *r, int s) {
    uint8_t b = u8(r), tb = u8(r), v = u8(r);
    size_t size = decode_size(r);
    int pi = pick_resident_pool(b);
    if (pi < 0 || P[pi].sealed || C[s].active || !size || size > HUGE_LIMIT) return;
    int t = pick_stream(tb);
    int tm = fork_of[t] >= 0 ? fork_of[t] : t; /* a fork allocates in its origin's capture */
    TRACE("eager block freed under capture: #%u %zu bytes on stream %d, other stream %d\n", P[pi].uid, size, s, t);
    int ai = do_alloc_want(pi, size, s, -1); /* (a bounded pool opens the gates here) */
    if (ai < 0) return;
    op_gate(s);
    size_t n = A[ai].size < 1024 ? A[ai].size : 1024;
    EXPECT_OK(cpool_memset_async(S[s], A[ai].ptr, (int)v, n));
    enqueue_marker(s);
    EXPECT_OK(cpool_capture_begin(S[s], P[pi].p, CPOOL_CAPTURE_GLOBAL));
    model_capture_begin(s, pi, CPOOL_CAPTURE_GLOBAL);
    do_free_valid(ai, s);
    if (t != s && !in_capture(t)) {
        EXPECT_OK(cpool_capture_begin(S[t], P[pi].p, CPOOL_CAPTURE_GLOBAL));
        model_capture_begin(t, pi, CPOOL_CAPTURE_GLOBAL);
    }
    for (int k = 0; k < 1 + (v & 3); k++) {
        (void)do_alloc_on(pi, size, tm, t, -1);
        if (v & 4) do_alloc(pi, size, s);
    }
    if (v & 8) { /* the gated work runs: now the block may go to a capture */
        TRACE("open gates\n");
        open_gates();
        (void)do_alloc_on(pi, size, tm, t, -1);
    }
}

/* A bounded pool under capture, where the model can tell the status: a
 * fresh pool bound to 3 MiB holds one 2 MiB segment whose blocks were all
 * freed on stream t, idle or held back by a gate; a capture on s then
 * allocates at most 2 MiB, which needs a graph page: graph memory never
 * shares a page with eager memory. Idle, the allocation must succeed once
 * the idle segment went back; held back, it must fail. */
void op_bounded_capture(rd *r, int s) {
    uint8_t v = u8(r), tb = u8(r), zb = u8(r);
    int t = pick_stream(tb);
    int pi = free_pool_slot();
    if (pi < 0 || C[s].active || in_capture(t)) return;
    bool gated = v & 1, eager_large = v & 2, cap_large = v & 4;
    int nsmall = 1 + (v >> 3) % 3;
    const uint64_t bound = 3u << 20;
    TRACE("bounded pool under capture: eager %s on stream %d%s, capture on %d allocates %s\n",
          eager_large ? "large" : "small", t, gated ? " (gated)" : "", s, cap_large ? "large" : "small");
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.max_reserved_bytes = bound;
    cpool_pool *p = NULL;
    EXPECT_OK(cpool_pool_create(dev, &o, &p));
    adopt_pool(pi, p, bound);
    int ais[3], na = 0;
    if (eager_large) {
        int ai = do_alloc_want(pi, MIB + 512 + (size_t)zb * 2048, t, CPOOL_OK);
        if (ai >= 0) ais[na++] = ai;
    } else {
        for (int k = 0; k < nsmall; k++) {
            int ai = do_alloc_want(pi, 1 + (size_t)zb * 37 + (size_t)k * 1000, t, CPOOL_OK);
            if (ai >= 0) ais[na++] = ai;
        }
    }
    if (gated) op_gate(t);
    for (int k = 0; k < na; k++) {
        size_t n = A[ais[k]].size < 4096 ? A[ais[k]].size : 4096;
        EXPECT_OK(cpool_memset_async(S[t], A[ais[k]].ptr, (int)v, n));
    }
    if (na) enqueue_marker(t);
    for (int k = 0; k < na; k++) do_free_valid(ais[k], t);
    /* Held back: by this gate or an older one (nothing opens gates until
     * the allocation). Else t is made idle. */
    bool held = !sync_quietly(t);
    EXPECT_OK(cpool_capture_begin(S[s], p, CPOOL_CAPTURE_GLOBAL));
    model_capture_begin(s, pi, CPOOL_CAPTURE_GLOBAL);
    size_t csize = cap_large ? MIB + 512 + (size_t)(zb >> 1) * 8192 : 1 + (size_t)zb * 16;
    bool fails = held;
    cpool_pool_stats before = stats_of(pi);
    if (before.reserved_bytes != (2u << 20) || before.segment_count != 1)
        fail("pool #%u: %llu bytes in %llu segments after its first blocks, expected one 2 MiB segment", P[pi].uid,
             (unsigned long long)before.reserved_bytes, (unsigned long long)before.segment_count);
    int ai = do_alloc_want(pi, csize, s, fails ? CPOOL_ERR_OUT_OF_MEMORY : CPOOL_OK);
    cpool_pool_stats after = stats_of(pi);
    if (after.reserved_bytes != (2u << 20))
        fail("pool #%u: %llu bytes reserved after the allocation under capture, expected 2 MiB", P[pi].uid,
             (unsigned long long)after.reserved_bytes);
    (void)ai;
    if (v & 64) do_capture_end(s);
}

/* ---- operations: forks of a multi-stream capture --------------------------------- */

/* Work of a fork left unjoined: its capture fails, so it never runs. */
static void fn_unjoined(void *arg) {
    (void)arg;
    fail("work captured on a fork that was never joined back ran");
}

/* A fork and a join of a multi-stream capture: a fixed stream x, not
 * capturing, joins s's capture through a record on s (then reports it as
 * its own, refuses to end or begin one), allocates and frees as a branch of
 * it, and is joined back through a record on x, or, one time in four, is
 * left unjoined (s's end must then fail). x takes part until s's capture
 * ends. */
void op_fork(rd *r, int s) {
    enum { FORK_EVENTS = 3 };
    uint8_t v = u8(r), pb = u8(r);
    /* A fork left unjoined stays so: joining it now would let the end pass. */
    if (!C[s].active || C[s].invalidated || C[s].unjoined) return;
    cpool_event *ev[FORK_EVENTS] = {NULL};
    uint32_t ev_vc[FORK_EVENTS][NS]; /* the recording stream's clock at its record */
    bool recorded[FORK_EVENTS] = {false};
    for (int k = 0; k < FORK_EVENTS; k++) EXPECT_OK(cpool_event_create(dev, &ev[k]));
    int pi = pick_pool(pb);
    /* A script of records, waits (forks of fixed streams outside any
     * capture, joins of streams in it), allocations and frees, in any
     * order: a fork may wait for a record made before frees of its
     * recorder, a join for a record made before its recorder joined
     * others. */
    for (int step = 0; step < (int)(v % 16); step++) {
        uint8_t o = u8(r), q = u8(r), k = u8(r) % FORK_EVENTS;
        int x = q % NFIXED;
        bool mine = x == s || fork_of[x] == s;
        if (!recorded[k]) /* a wait takes an event recorded, if there is one */
            for (int j = 1; j < FORK_EVENTS && !recorded[k]; j++)
                if (recorded[(k + j) % FORK_EVENTS]) k = (uint8_t)((k + j) % FORK_EVENTS);
        switch (o % 8) {
        case 0:
        case 1: /* a record on a stream of the capture */
            if (!mine) break;
            TRACE("record fork event %d on stream %d\n", k, x);
            EXPECT_OK(cpool_event_record(ev[k], S[x]));
            EXPECT(cpool_event_query(ev[k]), CPOOL_ERR_INVALID_ARGUMENT);
            memcpy(ev_vc[k], C[s].vc[x], sizeof ev_vc[k]);
            recorded[k] = true;
            break;
        case 2:
        case 3: /* a wait: a fork, or a join */
            if (!recorded[k] || (!mine && (!S[x] || C[x].active || fork_of[x] >= 0))) break;
            TRACE("stream %d waits for fork event %d%s\n", x, k, mine ? "" : ": forked into the capture");
            EXPECT_OK(cpool_stream_wait_event(S[x], ev[k]));
            if (!mine) {
                fork_of[x] = s;
                memset(C[s].vc[x], 0, sizeof C[s].vc[x]);
                cpool_graph *g = NULL;
                EXPECT(cpool_capture_end(S[x], &g), CPOOL_ERR_INVALID_ARGUMENT);
                if (g) fail("cpool_capture_end on a fork left *graph_out set");
                EXPECT(cpool_capture_begin(S[x], NULL, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_ALREADY_CAPTURING);
            }
            branch_order_after(s, x, ev_vc[k]);
            break;
        case 4:
        case 5:
            if (mine && pi >= 0) (void)do_alloc_on(pi, decode_size(r), s, x, -1);
            break;
        default: {
            int ai = pick_alloc(u8(r), true);
            if (mine && ai >= 0 && !capture_frees_suspended(ai, s)) do_free_on(ai, s, x);
            break;
        }
        }
    }
    check_all();
    /* Every fork joins back (its last work recorded and waited for by the
     * origin), or one is left unjoined with work of its own: the end fails. */
    bool leave = v % 64 >= 56;
    for (int x = 0; x < NFIXED; x++) {
        if (fork_of[x] != s) continue;
        if (leave) {
            TRACE("stream %d left unjoined in stream %d's capture\n", x, s);
            EXPECT_OK(cpool_launch_host(S[x], fn_unjoined, NULL));
            C[s].unjoined = true;
            leave = false;
            continue;
        }
        TRACE("join stream %d back into stream %d\n", x, s);
        EXPECT_OK(cpool_event_record(ev[0], S[x]));
        EXPECT_OK(cpool_stream_wait_event(S[s], ev[0]));
        branch_order_after(s, s, C[s].vc[x]);
    }
    for (int k = 0; k < FORK_EVENTS; k++) cpool_event_destroy(ev[k]);
}
