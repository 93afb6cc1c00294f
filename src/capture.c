/*
 * Capture: begin / end / status and the scoped form.
 *
 * A capture begun here is a cpool__capture kept in its stream. It holds a
 * reference to every pool it uses (the bound one first), so the pools
 * outlive the capture; at a successful end the references move into the
 * graph, and on every failure they are dropped, leaving nothing behind.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

bool cpool__capture_holds(const cpool__capture *cap, const cpool_pool *pool) {
    for (size_t i = 0; i < cap->pool_count; i++)
        if (cap->pools[i].pool == pool) return true;
    return false;
}

/* An empty capture (the inline slots are left as they are: unused). */
static void capture_init(cpool__capture *cap, cpool_capture_mode mode) {
    cap->mode = mode;
    cap->pools = cap->inline_pools;
    cap->pool_count = 0;
    cap->pool_cap = CPOOL__CAPTURE_INLINE_POOLS;
    cap->has_bound_pool = false;
    cap->host_work = false;
}

void cpool__capture_move(cpool__capture *to, cpool__capture *from) {
    *to = *from;
    if (from->pools == from->inline_pools) to->pools = to->inline_pools;
    capture_init(from, from->mode);
}

cpool_status cpool__capture_reserve(cpool__capture *cap) {
    if (cap->pool_count < cap->pool_cap) return CPOOL_OK;
    size_t n = 2 * cap->pool_cap;
    bool on_heap = cap->pools != cap->inline_pools;
    cpool__held_pool *pools = cpool__realloc(on_heap ? cap->pools : NULL, n * sizeof *pools);
    if (!pools) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory holding a pool for a capture");
    if (!on_heap) memcpy(pools, cap->inline_pools, cap->pool_count * sizeof *pools);
    cap->pools = pools;
    cap->pool_cap = n;
    return CPOOL_OK;
}

void cpool__capture_hold(cpool__capture *cap, cpool_pool *pool) {
    if (cpool__capture_holds(cap, pool)) return;
    cap->pools[cap->pool_count++] = (cpool__held_pool){cpool__pool_retain(pool), cpool__pool_generation(pool)};
    cpool__pool_capture_attach(pool);
}

/* Lets go of the capture's pools without touching their references (they
 * are someone else's now); the capture is not used after. */
static void capture_forget(cpool__capture *cap) {
    if (cap->pools != cap->inline_pools) free(cap->pools);
}

/* Drops the capture's references; the capture is not used after. */
static void capture_release(cpool__capture *cap) {
    for (size_t i = 0; i < cap->pool_count; i++) {
        cpool__pool_capture_detach(cap->pools[i].pool);
        cpool__pool_release(cap->pools[i].pool);
    }
    capture_forget(cap);
}

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
    cpool_capture_state state = CPOOL_CAPTURE_NONE;
    if (s->capture ||
        (ask_backend && s->dev->be->capture_status(s->impl, &state) == CPOOL_OK && state != CPOOL_CAPTURE_NONE))
        return cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "%s: the stream is already capturing", what);
    return CPOOL_OK;
}

/* Resolves a stream handle and an optional pool handle into s and pool. */
#define RESOLVE_STREAM_AND_POOL(s, pool, fn)                                                       \
    do {                                                                                           \
        CPOOL__RESOLVE(s, s##_handle, fn, "stream");                                               \
        (pool) = NULL;                                                                             \
        if (pool##_handle) CPOOL__RESOLVE(pool, pool##_handle, fn, "pool");                        \
    } while (0)

static cpool_status capture_begin(cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode) {
    cpool_status st = capture_check("cpool_capture_begin", s, pool, mode, false);
    if (st != CPOOL_OK) return st;
    /* Built here and moved into the stream once the backend capture began:
     * a capture costs no allocation unless it holds many pools. */
    cpool__capture cap;
    capture_init(&cap, mode);
    if (pool) cpool__capture_hold(&cap, pool); /* fits inline */
    cap.has_bound_pool = pool != NULL;
    st = cpool__stream_begin_capture(s, mode, &cap);
    if (st != CPOOL_OK) capture_release(&cap);
    return st;
}

cpool_status cpool_capture_begin(cpool_stream *s_handle, cpool_pool *pool_handle, cpool_capture_mode mode) {
    cpool_stream *s;
    cpool_pool *pool;
    RESOLVE_STREAM_AND_POOL(s, pool, "cpool_capture_begin");
    return capture_begin(s, pool, mode);
}

/* Ends the backend capture and wraps it; on failure drops the capture. */
static cpool_status capture_finish(cpool_stream *s, bool instantiate, cpool_graph **graph_out) {
    cpool__capture cap;
    cpool__stream_take_capture(s, &cap);
    cpool__bgraph *impl = NULL;
    cpool_status st = s->dev->be->capture_end(s->impl, instantiate, &impl);
    if (st == CPOOL_OK) {
        st = cpool__graph_wrap(s->dev, impl, &cap, graph_out);
        if (st != CPOOL_OK) s->dev->be->graph_destroy(impl);
    }
    if (st == CPOOL_OK) {
        capture_forget(&cap); /* its references are the graph's now */
    } else {
        *graph_out = NULL;
        capture_release(&cap);
    }
    return st;
}

cpool_status cpool_capture_end(cpool_stream *s_handle, cpool_graph **graph_out) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, s_handle, "cpool_capture_end", "stream");
    if (!graph_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_end: NULL argument");
    *graph_out = NULL;
    if (!s->capture) {
        /* Not ours: let the backend tell "not capturing" from "captured
         * outside capturepool". */
        cpool__bgraph *impl = NULL;
        return s->dev->be->capture_end(s->impl, true, &impl);
    }
    cpool_graph *g = NULL;
    cpool_status st = capture_finish(s, true, &g);
    if (st == CPOOL_OK) *graph_out = cpool__handle_of(g);
    return st;
}

void cpool__capture_discard(cpool_stream *s) {
    if (!s->capture) return;
    cpool_graph *g = NULL;
    if (capture_finish(s, false, &g) == CPOOL_OK) cpool__graph_release(g);
}

cpool_status cpool_capture_status(cpool_stream *s_handle, cpool_capture_state *out) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, s_handle, "cpool_capture_status", "stream");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture_status: NULL argument");
    return s->dev->be->capture_status(s->impl, out);
}

cpool_status cpool__capture_run(cpool_stream *s, cpool_pool *pool, cpool_capture_mode mode, cpool_capture_fn body,
                                void *ctx, bool instantiate, cpool_graph **graph_out) {
    if (!body || !graph_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_capture: NULL argument");
    *graph_out = NULL;
    cpool_status st = capture_begin(s, pool, mode);
    if (st != CPOOL_OK) return st;
    st = body(cpool__handle_of(s), ctx);
    if (st != CPOOL_OK) {
        cpool__capture_discard(s);
        return st;
    }
    return capture_finish(s, instantiate, graph_out);
}

cpool_status cpool_capture(cpool_stream *s_handle, cpool_pool *pool_handle, cpool_capture_mode mode,
                           cpool_capture_fn body, void *ctx, cpool_graph **graph_out) {
    cpool_stream *s;
    cpool_pool *pool;
    RESOLVE_STREAM_AND_POOL(s, pool, "cpool_capture");
    cpool_status st = cpool__capture_run(s, pool, mode, body, ctx, true, graph_out);
    if (st == CPOOL_OK) *graph_out = cpool__handle_of(*graph_out);
    return st;
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
    for (int i = 0; i < warmup_runs; i++) {
        cpool_status st = body(s_handle, ctx);
        if (st != CPOOL_OK) return st;
    }
    cpool_status st = cpool__capture_run(s, pool, mode, body, ctx, true, out);
    if (st == CPOOL_OK) *out = cpool__handle_of(*out);
    return st;
}
