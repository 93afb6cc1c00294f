/*
 * Captured graphs: launch, upload, references, and release after completion.
 *
 * A graph owns its backend executable and one reference to each pool its
 * capture held, with the pool's generation at that time. Launch checks every
 * pool's generation inside the pool's launch bracket, so a clear either
 * sees the launch (and waits for its work) or the launch sees the clear
 * (and refuses with CPOOL_ERR_STALE_GRAPH). The backend frees an executable
 * destroyed while a launch runs only once that launch finished; a pool
 * whose last reference was the graph's is torn down by the library's thread,
 * which waits for the device before dropping anything, so that a release
 * never waits. A graph whose last reference goes inside a stream callback is
 * torn down by the library's thread too: CUDA refuses CUDA calls there.
 *
 * A hold (cpool_capture_detach) is a graph without an executable (impl
 * NULL): it keeps the memory of a capture that its owner ended and
 * launches; every call that needs the executable refuses it.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "graph_pages.h"
#include "internal.h"
#include "struct_size.h"

struct cpool_graph {
    cpool__handle_header handle;
    atomic_int refs;      /* the callers' and a launch's that holds the graph */
    atomic_int user_refs; /* the callers': a release beyond them is refused */
    atomic_int holds;     /* cpool__graph_hold's: launches not yet enqueued */
    uint64_t id;
    cpool_device *dev;
    cpool__bgraph *impl;
    cpool__held_pool *pools; /* pools[0] is the capture's bound pool when has_bound_pool */
    size_t pool_count;
    bool pools_on_heap; /* else `pools` is own_pools */
    bool has_bound_pool;
    bool host_work; /* its capture's: a launch holds the graph (cpool_graph_launch) */
    cpool_capture_mode mode; /* of its capture, reused by update */
    _Atomic uint64_t replays;
    cpool__deferred deferred_destroy; /* a last release inside a stream callback */
    cpool__held_pool own_pools[CPOOL__CAPTURE_INLINE_POOLS];
};

static cpool__slab graph_slab = CPOOL__SLAB_INIT(cpool_graph, CPOOL__HANDLE_GRAPH);

uint64_t cpool__graph_new_id(void) {
    static _Atomic uint64_t next = 1;
    return atomic_fetch_add(&next, 1);
}

cpool_status cpool__graph_wrap(cpool_device *dev, cpool__bgraph *impl, const cpool__capture *cap, cpool_graph **out) {
    cpool_graph *g = cpool__slab_take(&graph_slab);
    cpool__held_pool *pools = g ? g->own_pools : NULL;
    if (g && cap->pool_count > CPOOL__CAPTURE_INLINE_POOLS) {
        pools = cpool__malloc(cap->pool_count * sizeof *pools);
        if (!pools) {
            cpool__handle_kill(g);
            cpool__slab_give(&graph_slab, g);
        }
    }
    if (!pools) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory ending a capture");
    atomic_init(&g->refs, 1);
    atomic_init(&g->user_refs, 1);
    atomic_init(&g->replays, 0);
    g->dev = cpool__device_retain(dev);
    g->impl = impl;
    g->pools = pools; /* the capture's references, now the graph's */
    g->pools_on_heap = pools != g->own_pools;
    g->pool_count = cap->pool_count;
    if (cap->pool_count) memcpy(g->pools, cap->pools, cap->pool_count * sizeof *g->pools);
    g->id = cap->graph_id;
    g->has_bound_pool = cap->has_bound_pool;
    g->host_work = cap->host_work;
    g->mode = cap->mode;
    *out = g;
    return CPOOL_OK;
}

/* Drops a graph's references to its pools. A pool whose last reference
 * this was is torn down here where the device's work is over already, else
 * by the library's thread, which waits for it there: a graph's release
 * never waits for work that may be long. */
static void release_pools(cpool__held_pool *pools, size_t count, bool on_heap) {
    for (size_t i = 0; i < count; i++) {
        cpool__pool_release_arena(pools[i].pool, pools[i].arena); /* and the graph's hold */
        cpool__pool_release_without_waiting(pools[i].pool);
    }
    if (on_heap) free(pools);
}

/* Enters every pool's launch bracket, or none: the graph is stale. */
static cpool_status launch_enter(cpool_graph *g, const char *fn) {
    for (size_t i = 0; i < g->pool_count; i++) {
        cpool_status st = cpool__pool_launch_enter(g->pools[i].pool, g->pools[i].generation);
        if (st == CPOOL_OK && (!g->pools[i].arena || cpool__arena_note_launch(g->pools[i].arena))) continue;
        if (st == CPOOL_OK) i++; /* its bracket was entered too */
        while (i--) cpool__pool_launch_exit(g->pools[i].pool);
        if (st == CPOOL_OK)
            return cpool__fail(CPOOL_ERR_BACKEND,
                               "%s: pages of the graph's memory were lost (a remap failed, and so did mapping the old "
                               "memory back): it can no longer be launched",
                               fn);
        if (st == CPOOL_ERR_SUSPENDED)
            return cpool__fail(st, "%s: a pool the graph holds is suspended (cpool_pool_resume gives it memory again)",
                               fn);
        return cpool__fail(st, "%s: the graph's pool buffers were cleared after its capture: it can no longer be launched",
                           fn);
    }
    return CPOOL_OK;
}

static void launch_exit(cpool_graph *g) {
    for (size_t i = 0; i < g->pool_count; i++) cpool__pool_launch_exit(g->pools[i].pool);
}

static void graph_release(cpool_graph *g);

/* A hold's refusal of a call that needs an executable. */
static cpool_status no_executable(const char *what) {
    return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                       "%s: the graph holds the memory of a capture ended by its owner (cpool_capture_detach): it "
                       "has no executable",
                       what);
}

static cpool_status launch_check(const char *what, cpool_graph *g, cpool_stream *s) {
    if (!g->impl) return no_executable(what);
    if (s->dev != g->dev) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the stream is on another device", what);
    if (cpool__stream_capture(s)) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the stream is capturing", what);
    return CPOOL_OK;
}

/* The start of a launch or an upload: the handles resolved and checked,
 * and every pool's launch bracket entered (launch_exit leaves them). */
static inline __attribute__((always_inline)) cpool_status launch_begin(const char *fn, cpool_graph *g_handle,
                                                                        cpool_stream *s_handle, cpool_graph **g,
                                                                        cpool_stream **s) {
    CPOOL__RESOLVE(*g, g_handle, CPOOL__HANDLE_GRAPH, fn, "graph");
    CPOOL__RESOLVE(*s, s_handle, CPOOL__HANDLE_STREAM, fn, "stream");
    cpool_status st = launch_check(fn, *g, *s);
    return st == CPOOL_OK ? launch_enter(*g, fn) : st;
}

cpool_status cpool_graph_launch(cpool_graph *g_handle, cpool_stream *s_handle) {
    cpool_graph *g = NULL;
    cpool_stream *s = NULL; /* set when st is CPOOL_OK (gcc cannot tell) */
    cpool_status st = launch_begin("cpool_graph_launch", g_handle, s_handle, &g, &s);
    if (st != CPOOL_OK) return st;
    /* A host callback it launches may release the graph's last reference
     * before this call returns: then the launch holds the graph meanwhile.
     * Without host work nothing it launches can. */
    bool hold = g->host_work;
    if (hold) atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    st = g->dev->be->graph_launch(g->impl, s->impl);
    launch_exit(g);
    if (st == CPOOL_OK) atomic_fetch_add_explicit(&g->replays, 1, memory_order_relaxed);
    if (hold) graph_release(g);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_graph_launch", st);
}

cpool_status cpool_graph_upload(cpool_graph *g_handle, cpool_stream *s_handle) {
    cpool_graph *g = NULL;
    cpool_stream *s = NULL; /* set when st is CPOOL_OK (gcc cannot tell) */
    cpool_status st = launch_begin("cpool_graph_upload", g_handle, s_handle, &g, &s);
    if (st != CPOOL_OK) return st;
    st = g->dev->be->graph_upload(g->impl, s->impl);
    launch_exit(g);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_graph_upload", st);
}

/* The graph behind a handle for a call that returns a value, or NULL (the
 * reason noted for a dead handle). */
static cpool_graph *graph_or_null(const cpool_graph *handle, const char *fn) {
    cpool_graph *g;
    CPOOL__RESOLVE_OR_NULL(g, handle, CPOOL__HANDLE_GRAPH, fn, "graph");
    return g;
}

uint64_t cpool_graph_id(const cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_id");
    return g ? g->id : 0;
}

uint64_t cpool_graph_replays(const cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_replays");
    return g ? atomic_load(&g->replays) : 0;
}

cpool_status cpool_graph_get_stats(const cpool_graph *handle, cpool_graph_stats *out) {
    const cpool_graph *g;
    CPOOL__RESOLVE(g, handle, CPOOL__HANDLE_GRAPH, "cpool_graph_get_stats", "graph");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_get_stats: NULL argument");
    size_t size = out->struct_size;
    CPOOL__CHECK_STRUCT_SIZE(size, CPOOL__SIZE_THROUGH(cpool_graph_stats, pool_count),
                             "cpool_graph_get_stats: struct_size");
    cpool_graph_stats s = {.struct_size = size, .pool_count = g->pool_count};
    for (size_t i = 0; i < g->pool_count; i++) {
        if (!g->pools[i].arena) continue;
        cpool__arena_stats as;
        cpool__pool_arena_stats(g->pools[i].pool, g->pools[i].arena, &as);
        s.write_bytes += as.mapped_bytes;
        s.shared_write_bytes += as.shared_bytes;
        s.own_bytes += as.own_bytes;
        s.live_output_bytes += as.live_bytes;
        s.live_outputs += as.live_blocks;
    }
    cpool__copy_struct(out, &s, size, sizeof s);
    return CPOOL_OK;
}

/* The bound pool's object, or NULL. */
static cpool_pool *bound_pool(const cpool_graph *g) { return g->has_bound_pool ? g->pools[0].pool : NULL; }

cpool_pool *cpool_graph_pool(const cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_pool");
    return g && bound_pool(g) ? cpool__handle_of(bound_pool(g)) : NULL;
}

size_t cpool_graph_pool_buffer_count(const cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_pool_buffer_count");
    return g && bound_pool(g) ? cpool_pool_buffer_count(cpool__handle_of(bound_pool(g))) : 0;
}

void *cpool_graph_native(const cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_native");
    return g && g->impl ? g->dev->be->graph_native(g->impl) : NULL;
}

cpool_status cpool__graph_update_check(cpool_graph *g, cpool_stream *s, cpool__capture_recipe *out) {
    cpool_status st = launch_check("cpool_graph_update", g, s);
    if (st != CPOOL_OK) return st;
    *out = (cpool__capture_recipe){.pool = bound_pool(g), .mode = g->mode, .graph_id = g->id};
    return CPOOL_OK;
}

cpool_status cpool__graph_take_work(cpool_graph *g, cpool_graph *fresh) {
    cpool_status st;
    /* g takes fresh's pool references into an array of its own: made first,
     * so that a failure leaves g as it was. */
    cpool__held_pool *pools = cpool__malloc((fresh->pool_count ? fresh->pool_count : 1) * sizeof *pools);
    if (!pools) {
        graph_release(fresh);
        return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory updating a graph");
    }
    if (!g->dev->be->graph_update_in_place(g->impl, fresh->impl)) {
        st = g->dev->be->graph_instantiate(fresh->impl);
        if (st != CPOOL_OK) {
            free(pools);
                graph_release(fresh);
            return st;
        }
        cpool__bgraph *impl = g->impl;
        g->impl = fresh->impl;
        fresh->impl = impl;
    }
    /* g now runs the new work with the new capture's pools; the old
     * executable leaves with fresh, then the old pools are dropped. */
    cpool__held_pool *old = g->pools;
    size_t old_count = g->pool_count;
    bool old_on_heap = g->pools_on_heap;
    memcpy(pools, fresh->pools, fresh->pool_count * sizeof *pools);
    g->pools = pools;
    g->pool_count = fresh->pool_count;
    g->pools_on_heap = true;
    g->host_work = fresh->host_work;
    fresh->pool_count = 0;
    graph_release(fresh);
    release_pools(old, old_count, old_on_heap);
    return CPOOL_OK;
}

cpool_status cpool_graph_dump_dot(const cpool_graph *handle, const char *path) {
    const cpool_graph *g;
    CPOOL__RESOLVE(g, handle, CPOOL__HANDLE_GRAPH, "cpool_graph_dump_dot", "graph");
    if (!path) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_graph_dump_dot: NULL argument");
    if (!g->impl) return no_executable("cpool_graph_dump_dot");
    cpool_status st = g->dev->be->graph_dump_dot(g->impl, path);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_graph_dump_dot", st);
}

cpool_graph *cpool__graph_hold(cpool_graph *g) {
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->holds, 1, memory_order_relaxed);
    return g;
}

bool cpool__graph_held(const cpool_graph *g) { return atomic_load_explicit(&g->holds, memory_order_relaxed) != 0; }

cpool_graph *cpool_graph_retain(cpool_graph *handle) {
    cpool_graph *g = graph_or_null(handle, "cpool_graph_retain");
    if (!g) return NULL;
    atomic_fetch_add(&g->user_refs, 1);
    atomic_fetch_add(&g->refs, 1);
    return handle;
}

static void graph_teardown(cpool_graph *g) {
    if (g->impl) g->dev->be->graph_destroy(g->impl);
    release_pools(g->pools, g->pool_count, g->pools_on_heap);
    cpool_device *dev = g->dev;
    cpool__slab_give(&graph_slab, g);
    cpool__device_release(dev);
}

static void run_deferred_destroy(cpool__deferred *task) {
    graph_teardown((cpool_graph *)((char *)task - offsetof(cpool_graph, deferred_destroy)));
}

static void graph_release(cpool_graph *g) {
    if (atomic_fetch_sub(&g->refs, 1) != 1) return;
    cpool__handle_kill(g);
    if (cpool__on_stream_thread()) {
        g->deferred_destroy.run = run_deferred_destroy;
        cpool__defer(&g->deferred_destroy);
    } else {
        graph_teardown(g);
    }
}

void cpool__graph_unhold(cpool_graph *g) {
    atomic_fetch_sub_explicit(&g->holds, 1, memory_order_relaxed);
    graph_release(g);
}

void cpool_graph_release(cpool_graph *handle) {
    cpool_graph *g;
    CPOOL__RESOLVE_VOID(g, handle, CPOOL__HANDLE_GRAPH, "cpool_graph_release", "graph");
    if (cpool__take_user_ref(&g->user_refs, "cpool_graph_release", "graph")) graph_release(g);
}
