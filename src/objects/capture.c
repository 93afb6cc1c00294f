/*
 * Capture: begin / end / status, the scoped form, graphed calls (eager
 * warm-ups, then a capture) and graph updates (which capture again).
 *
 * A capture begun here is a cpool__capture record kept in its stream
 * (capture_record.c). It holds a reference to every pool it uses (the bound
 * one first), so the pools outlive the capture; at a successful end the
 * pages of the graph's outputs become its own in each pool's arena
 * (graph_pages.h) and the references move into
 * the graph (graph.c); on every failure they are dropped, leaving nothing
 * behind.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* What makes a capture on s with pool and mode impossible, checked before
 * anything runs. The backend itself refuses a stream captured outside
 * capturepool at begin; `ask_backend` checks that now too (for a graphed
 * call, before its warm-ups run). */
static cpool_status capture_check(const char *what, cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode,
                                  bool ask_backend) {
    if (mode != CPOOL_CAPTURE_GLOBAL && mode != CPOOL_CAPTURE_THREAD_LOCAL && mode != CPOOL_CAPTURE_RELAXED)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: unknown capture mode %d", what, (int)mode);
    if (pool && cpool__pool_device(pool) != s->dev)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the pool is on another device", what);
    if (ask_backend ? cpool__stream_captures(s) : cpool__stream_capture(s) != NULL)
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "%s: the stream is already capturing", what);
    return CPOOL_OK;
}

/* Resolves a stream handle and an optional pool handle into s and pool. */
#define RESOLVE_STREAM_AND_POOL(s, pool, fn)                                                       \
    do {                                                                                           \
        CPOOL__RESOLVE(s, s##_handle, CPOOL__HANDLE_STREAM, fn, "stream");                         \
        (pool) = NULL;                                                                             \
        if (pool##_handle) CPOOL__RESOLVE(pool, pool##_handle, CPOOL__HANDLE_POOL, fn, "pool");    \
    } while (0)

/* `fn`: the public function that begins it, named by its failures. */
static cpool_status capture_begin(const char *fn, cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode,
                                  const cpool__capture_plan *plan) {
    cpool_status st = capture_check(fn, s, pool, mode, false);
    if (st != CPOOL_OK) return st;
    /* Built here and moved into the stream once the backend capture began:
     * a capture costs no allocation unless it holds many pools. */
    cpool__capture cap;
    cpool__capture_init(&cap, mode, cpool__pool_clear_clock(), plan);
    if (!cap.plan && pool) cpool__pool_predict_outputs(pool, &cap);
    if (pool) cpool__pool_hold_in_capture(&cap, pool, true); /* fits inline */
    /* After the hold: a suspend from now on sees the capture and refuses. */
    st = pool && cpool__pool_is_suspended(pool)
             ? cpool__fail(CPOOL_ERR_SUSPENDED, "the pool is suspended (cpool_pool_resume gives it memory again)")
             : cpool__capture_publish(s, &cap);
    if (st != CPOOL_OK) cpool__capture_release(&cap);
    return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
}

cpool_status cpool_capture_begin(cpool_stream *s_handle, cpool_pool *pool_handle, cpool_capture_mode mode) {
    cpool_stream *s;
    cpool_pool *pool;
    RESOLVE_STREAM_AND_POOL(s, pool, "cpool_capture_begin");
    return capture_begin("cpool_capture_begin", s, pool, mode, NULL);
}

/* ---- what a capture does to the pools it holds --------------------------- */

void cpool__capture_join_branch(cpool__capture *cap, cpool__stream_key from, uint64_t upto, cpool__stream_key to) {
    if (!cap->branch_tagged) return;
    for (size_t i = 0; i < cap->pool_count; i++)
        cpool__pool_retag_branch(cap->pools[i].pool, cap->pools[i].arena, cap->id, from, upto, to);
}

void cpool__capture_end_branches(cpool__capture *cap, uint64_t origin_id) {
    if (!cap->branch_tagged) return;
    cpool__capture_join_branch(cap, cpool__key_branch(origin_id), UINT64_MAX, CPOOL__KEY_ANY);
    for (size_t k = 0; k < cap->fork_count; k++)
        cpool__capture_join_branch(cap, cpool__key_branch(cap->forks[k].stream_id), UINT64_MAX, CPOOL__KEY_ANY);
}

void cpool__capture_release(cpool__capture *cap) {
    for (size_t i = 0; i < cap->pool_count; i++) {
        cpool_pool *pool = cap->pools[i].pool;
        struct cpool__arena *arena = cap->pools[i].arena;
        bool graph_hold = false; /* sealed for a graph that was not made */
        if (arena) {
            /* Its blocks are plain blocks now, for the caller to free: off
             * the shared pages if memory allows. */
            cpool__pool_seal_arena(pool, &arena, cap->id, 0);
            graph_hold = cpool__pool_release_arena(pool, arena);
        }
        if (!graph_hold) cpool__pool_capture_detach(pool);
        cpool__pool_release(pool);
    }
    cpool__capture_forget(cap);
}

void cpool__capture_discard(cpool_stream *s) {
    if (!cpool__capture_leave(s)) return; /* none, or a fork that left it */
    cpool__capture cap;
    cpool__capture_take(s, &cap);
    cpool__bgraph *impl = NULL;
    /* An attached capture is its owner's to end. */
    if (!cap.attached && s->dev->be->capture_end(s->impl, false, &impl) == CPOOL_OK) s->dev->be->graph_destroy(impl);
    cpool__capture_end_branches(&cap, cpool__stream_id(s));
    cpool__capture_release(&cap); /* it made no graph: what it kept is the caller's, no output */
}

/* ---- begin and end ---------------------------------------------------------- */

/* Seals the graph's arena in each pool it holds: the pages of its outputs
 * become its own. */
static cpool_status seal_arenas(cpool__capture *cap) {
    cpool_status st = CPOOL_OK;
    for (size_t i = 0; i < cap->pool_count && st == CPOOL_OK; i++) {
        struct cpool__arena *arena = cap->pools[i].arena;
        st = cpool__pool_seal_arena(cap->pools[i].pool, &arena, cap->id, cap->graph_id);
        cpool__capture_set_arena(&cap->pools[i], arena);
    }
    return st;
}

/* Ends the backend capture and wraps it; on failure drops the capture. Every
 * stream forked into it stops taking part first, so none adds to it. */
static cpool_status capture_finish(cpool_stream *s, bool instantiate, cpool_graph **graph_out) {
    cpool__capture cap;
    cpool__capture_take(s, &cap);
    if (!cap.graph_id) cpool__capture_set_graph_id(&cap, cpool__graph_new_id());
    cpool__bgraph *impl = NULL;
    cpool_status st = s->dev->be->capture_end(s->impl, instantiate, &impl);
    cpool__capture_end_branches(&cap, cpool__stream_id(s));
    if (st == CPOOL_OK && cap.invalidated) {
        s->dev->be->graph_destroy(impl);
        st = cpool__fail(CPOOL_ERR_CAPTURE_INVALIDATED,
                         "a stream forked into the capture was destroyed before it ended; its work is discarded");
    }
    if (st == CPOOL_OK) {
        st = seal_arenas(&cap);
        if (st == CPOOL_OK) st = cpool__graph_wrap(s->dev, impl, &cap, graph_out);
        if (st != CPOOL_OK) s->dev->be->graph_destroy(impl);
    }
    if (st == CPOOL_OK) {
        if (cap.has_bound_pool) cpool__pool_learn_outputs(cap.pools[0].pool, &cap);
        cpool__capture_forget(&cap); /* its references are the graph's now */
    } else {
        *graph_out = NULL;
        cpool__capture_release(&cap);
    }
    return st;
}

cpool_status cpool_capture_end(cpool_stream *s_handle, cpool_graph **graph_out) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, "cpool_capture_end", "stream");
    if (!graph_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_end: NULL argument");
    *graph_out = NULL;
    if (cpool__stream_is_fork(s))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_capture_end: the stream was forked into a capture begun on another stream: end it "
                           "there, once this one is joined back");
    cpool_graph *g = NULL;
    cpool_status st;
    const cpool__capture *rec = cpool__stream_capture(s);
    if (rec && rec->attached)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_capture_end: the capture was begun outside capturepool and a pool attached to it: "
                           "cpool_capture_detach, then its owner ends it");
    if (!rec) {
        /* Not ours: let the backend tell "not capturing" from "captured
         * outside capturepool". */
        cpool__bgraph *impl = NULL;
        st = s->dev->be->capture_end(s->impl, true, &impl);
    } else {
        st = capture_finish(s, true, &g);
    }
    if (st == CPOOL_OK) *graph_out = cpool__handle_of(g);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_capture_end", st);
}

/* ---- a capture begun outside the library ------------------------------------ */

cpool_status cpool_capture_attach(cpool_stream *s_handle, cpool_pool *pool_handle) {
    cpool_stream *s;
    cpool_pool *pool;
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, "cpool_capture_attach", "stream");
    CPOOL__RESOLVE(pool, pool_handle, CPOOL__HANDLE_POOL, "cpool_capture_attach", "pool");
    if (cpool__pool_device(pool) != s->dev)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_attach: the pool is on another device");
    if (cpool__stream_capture(s))
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING,
                           "cpool_capture_attach: the stream captures with capturepool already (attached, or begun "
                           "with cpool_capture_begin, whose captures allocate from any pool without an attach)");
    /* As capture_begin, bound to the pool; the mode is the owner's, which
     * the record keeps only for an update (refused for a hold). */
    cpool__capture cap;
    cpool__capture_init(&cap, CPOOL_CAPTURE_GLOBAL, cpool__pool_clear_clock(), NULL);
    cpool__pool_predict_outputs(pool, &cap);
    cpool__pool_hold_in_capture(&cap, pool, true); /* fits inline */
    cpool_status st = cpool__pool_is_suspended(pool)
                          ? cpool__fail(CPOOL_ERR_SUSPENDED,
                                        "the pool is suspended (cpool_pool_resume gives it memory again)")
                          : cpool__capture_attach_publish(s, &cap);
    if (st != CPOOL_OK) cpool__capture_release(&cap);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_capture_attach", st);
}

cpool_status cpool_capture_detach(cpool_stream *s_handle, cpool_graph **hold_out) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, "cpool_capture_detach", "stream");
    if (!hold_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_detach: NULL argument");
    *hold_out = NULL;
    if (cpool__stream_is_fork(s))
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_capture_detach: the stream was forked into the capture: detach on the stream "
                           "it was attached on");
    const cpool__capture *rec = cpool__stream_capture(s);
    if (!rec) return cpool__fail(CPOOL_ERR_NOT_CAPTURING, "cpool_capture_detach: no pool is attached to the stream");
    if (!rec->attached)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "cpool_capture_detach: the capture was begun with cpool_capture_begin: cpool_capture_end "
                           "ends it");
    /* As capture_finish, but the backend capture goes on for its owner:
     * the record leaves the stream (forks included), the arenas are sealed
     * and the references move into a graph with no executable. */
    cpool__capture cap;
    cpool__capture_take(s, &cap);
    if (!cap.graph_id) cpool__capture_set_graph_id(&cap, cpool__graph_new_id());
    cpool__capture_end_branches(&cap, cpool__stream_id(s));
    cpool_graph *g = NULL;
    cpool_status st = seal_arenas(&cap);
    if (st == CPOOL_OK) st = cpool__graph_wrap(s->dev, NULL, &cap, &g);
    if (st != CPOOL_OK) {
        cpool__capture_release(&cap);
        return cpool__fail_in("cpool_capture_detach", st);
    }
    if (cap.has_bound_pool) cpool__pool_learn_outputs(cap.pools[0].pool, &cap);
    cpool__capture_forget(&cap); /* its references are the hold's now */
    *hold_out = cpool__handle_of(g);
    return CPOOL_OK;
}

cpool_status cpool_capture_status(cpool_stream *s_handle, cpool_capture_state *out) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, "cpool_capture_status", "stream");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_status: NULL argument");
    cpool_status st = s->dev->be->capture_status(s->impl, out);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_capture_status", st);
}

cpool_status cpool__capture_run(const char *fn, cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode,
                                cpool_capture_fn body, void *ctx, const cpool__capture_plan *plan, bool instantiate,
                                cpool_graph **graph_out) {
    if (!body || !graph_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: NULL argument", fn);
    *graph_out = NULL;
    cpool_status st = capture_begin(fn, s, pool, mode, plan);
    if (st != CPOOL_OK) return st;
    st = body(cpool__handle_of(s), ctx);
    if (st != CPOOL_OK) {
        /* The discard may fail on its own (sealing the arena needs pages
         * on a full device): the body's status stays in its own words. */
        cpool__error_mark body_error;
        cpool__error_save(&body_error);
        cpool__capture_discard(s);
        cpool__error_restore(&body_error);
        return st;
    }
    st = capture_finish(s, instantiate, graph_out);
    return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
}

cpool_status cpool_capture(cpool_stream *s_handle, cpool_pool *pool_handle, cpool_capture_mode mode,
                           cpool_capture_fn body, void *ctx, cpool_graph **graph_out) {
    cpool_stream *s;
    cpool_pool *pool;
    RESOLVE_STREAM_AND_POOL(s, pool, "cpool_capture");
    cpool_status st = cpool__capture_run("cpool_capture", s, pool, mode, body, ctx, NULL, true, graph_out);
    if (st == CPOOL_OK) *graph_out = cpool__handle_of(*graph_out);
    return st;
}

/* The plan of a graphed call from what its last eager run left allocated;
 * false (no plan) when there is nothing to learn or no memory for it. */
static bool plan_from(cpool__learn *l, cpool__capture_plan *plan) {
    *plan = (cpool__capture_plan){.bits = l->count};
    if (l->failed || !l->count) return false;
    uint64_t *bits = cpool__calloc((l->count + 63) / 64, sizeof *bits);
    if (!bits) return false;
    for (size_t i = 0; i < l->count; i++)
        if (l->ptrs[i]) bits[i / 64] |= (uint64_t)1 << (i % 64);
    plan->outputs = bits;
    plan->streams = l->streams; /* the plan's now */
    l->streams = NULL;
    return true;
}

cpool_status cpool_graphed_call(cpool_stream *s_handle, cpool_pool *pool_handle, cpool_capture_mode mode,
                                int warmup_runs, cpool_capture_fn body, void *ctx, cpool_graph **out) {
    cpool_stream *s;
    cpool_pool *pool;
    RESOLVE_STREAM_AND_POOL(s, pool, "cpool_graphed_call");
    if (!body || !out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graphed_call: NULL argument");
    *out = NULL;
    if (warmup_runs < 0)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graphed_call: negative warmup_runs %d", warmup_runs);
    cpool_status check = capture_check("cpool_graphed_call", s, pool, mode, true);
    if (check != CPOOL_OK) return check;
    /* Eager runs first, so that lazy set-up happens outside capture. The
     * last shows which allocations outlive the body, stream by stream (a
     * body may fork streams into its capture): the capture packs them with
     * the pool's other outputs instead of giving them pages of their own. */
    cpool__learn learn = {0}, *outer = cpool__learning; /* a graphed call inside a body's eager run */
    for (int i = 0; i < warmup_runs; i++) {
        bool last = i == warmup_runs - 1;
        if (last) {
            atomic_fetch_add(&cpool__learners, 1);
            cpool__learning = &learn;
        }
        cpool_status st = body(s_handle, ctx);
        if (last) {
            cpool__learning = outer;
            atomic_fetch_sub(&cpool__learners, 1);
        }
        if (st != CPOOL_OK) {
            cpool__learn_forget(&learn);
            return st;
        }
    }
    cpool__capture_plan plan;
    bool planned = plan_from(&learn, &plan);
    cpool__learn_forget(&learn);
    cpool_status st =
        cpool__capture_run("cpool_graphed_call", s, pool, mode, body, ctx, planned ? &plan : NULL, true, out);
    free((void *)plan.outputs);
    free((void *)plan.streams);
    if (st == CPOOL_OK) *out = cpool__handle_of(*out);
    return st;
}

/* An update captures again, here, and hands the new work to the graph. */
cpool_status cpool_graph_update(cpool_graph *g_handle, cpool_stream *s_handle, cpool_capture_fn body, void *ctx) {
    cpool_graph *g;
    cpool_stream *s;
    CPOOL__RESOLVE(g, g_handle, CPOOL__HANDLE_GRAPH, "cpool_graph_update", "graph");
    CPOOL__RESOLVE(s, s_handle, CPOOL__HANDLE_STREAM, "cpool_graph_update", "stream");
    cpool__capture_recipe recipe;
    cpool_status st = cpool__graph_update_check(g, s, &recipe);
    if (st != CPOOL_OK) return st;
    if (!body) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_update: body is NULL");
    /* The new work is instantiated only if it cannot update g in place. */
    cpool_graph *fresh = NULL;
    cpool__capture_plan same_graph = {.graph_id = recipe.graph_id};
    st = cpool__capture_run("cpool_graph_update", s, recipe.pool, recipe.mode, body, ctx, &same_graph, false, &fresh);
    if (st != CPOOL_OK) return st;
    st = cpool__graph_take_work(g, fresh);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_graph_update", st);
}
