/*
 * ops_misuse.c: the fuzz_api harness's calls that the library must refuse,
 * and its simple queries (declared in ops.h and ops_internal.h): every call
 * with a dead pool, graph or stream handle, and a release too many (op_dead,
 * probe_dead_*); and op_misc: devices opened again or wrongly, NULL
 * arguments to stream, pool, capture and graph calls, zero-byte work, graph
 * queries, status and version strings, and ends of captures on streams that
 * do not capture.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- calls on dead handles ------------------------------------------------------- */

/* Sets cpool_last_error() to another failure's reason (EXPECT_REASON). */
void mark_error(char *buf, size_t n) {
    void *p = NULL;
    (void)cpool_alloc(NULL, 1, NULL, &p);
    snprintf(buf, n, "%s", cpool_last_error());
}

void never_drop(void *o) {
    (void)o;
    fail("the drop of a refused cpool_pool_record ran");
}

/* Every call on a dead pool handle: refused, nothing happens, and the reason
 * is left. `s` is a live stream. Also called from drops (any thread). */
void probe_dead_pool(cpool_pool *h, cpool_stream *s) {
    int local = 0;
    void *ptr = &local;
    cpool_param *prm = NULL;
    size_t idx = 77;
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    EXPECT_REASON(if (cpool_pool_retain(h)) fail("cpool_pool_retain of a dead pool returned it"));
    EXPECT_REASON(cpool_pool_release(h));
    EXPECT_REASON(cpool_pool_seal(h));
    EXPECT_REASON(cpool_pool_unseal(h));
    EXPECT_REASON(cpool_pool_clear_buffers(h));
    if (cpool_pool_is_sealed(h) || cpool_pool_buffer_count(h)) fail("queries on a dead pool handle");
    EXPECT_DEAD(cpool_pool_record(h, &local, never_drop, &idx));
    if (idx != 77) fail("a refused cpool_pool_record wrote its index");
    EXPECT_DEAD(cpool_alloc(h, 64, s, &ptr));
    if (ptr != &local) fail("a refused cpool_alloc wrote its output");
    EXPECT_DEAD(cpool_free(h, &local, s));
    EXPECT_DEAD(cpool_pool_get_stats(h, &st));
    EXPECT_DEAD(cpool_pool_trim(h));
    EXPECT_DEAD(cpool_param_create(h, 16, &prm));
    if (prm) fail("a refused cpool_param_create wrote its output");
    EXPECT_DEAD(cpool_pool_suspend(h, CPOOL_SUSPEND_KEEP_CONTENTS));
    EXPECT_DEAD(cpool_pool_resume(h));
    if (cpool_pool_is_suspended(h)) fail("cpool_pool_is_suspended of a dead pool handle");
}

int dummy_body_calls;

cpool_status dummy_body(cpool_stream *s, void *ctx) {
    (void)s;
    (void)ctx;
    dummy_body_calls++;
    return CPOOL_OK;
}

static void fn_never(void *arg) {
    (void)arg;
    fail("work enqueued on a dead stream ran");
}

/* Every call on a dead graph handle: refused, the body never runs. */
static void probe_dead_graph(cpool_graph *h, int s) {
    EXPECT_DEAD(cpool_graph_launch(h, S[s]));
    EXPECT_DEAD(cpool_graph_upload(h, S[s]));
    dummy_body_calls = 0;
    EXPECT_DEAD(cpool_graph_update(h, S[s], dummy_body, NULL));
    if (dummy_body_calls) fail("cpool_graph_update ran its body for a dead graph");
    EXPECT_DEAD(cpool_graph_dump_dot(h, "/dev/null"));
    if (cpool_graph_replays(h) || cpool_graph_pool(h) || cpool_graph_pool_buffer_count(h) || cpool_graph_native(h))
        fail("queries on a dead graph handle");
    EXPECT_REASON(if (cpool_graph_retain(h)) fail("cpool_graph_retain of a dead graph returned it"));
    EXPECT_REASON(cpool_graph_release(h));
}

/* Every call on a dead stream handle (s: a live stream, b picks a pool, an
 * allocation, a graph): refused, nothing enqueued, nothing destroyed (its
 * memory may be the temporary stream's now). */
void probe_dead_stream(cpool_stream *h, int s, uint8_t b) {
    int local = 0;
    void *ptr = &local;
    cpool_graph *g = NULL;
    cpool_capture_state cs;
    (void)s;
    EXPECT_DEAD(cpool_stream_synchronize(h));
    EXPECT_DEAD(cpool_launch_host(h, fn_never, NULL));
    EXPECT_DEAD(cpool_memset_async(h, &local, 0, sizeof local));
    EXPECT_DEAD(cpool_memset_async(h, &local, 0, 0));
    EXPECT_DEAD(cpool_memcpy_async(h, &local, &local, sizeof local));
    EXPECT_DEAD(cpool_capture_status(h, &cs));
    int pi = pick_pool(b);
    cpool_pool *p = pi >= 0 ? P[pi].p : NULL;
    EXPECT_DEAD(cpool_capture_begin(h, p, CPOOL_CAPTURE_GLOBAL));
    EXPECT_DEAD(cpool_capture_end(h, &g));
    dummy_body_calls = 0;
    EXPECT_DEAD(cpool_capture(h, p, CPOOL_CAPTURE_GLOBAL, dummy_body, NULL, &g));
    EXPECT_DEAD(cpool_graphed_call(h, p, CPOOL_CAPTURE_GLOBAL, 1, dummy_body, NULL, &g));
    if (dummy_body_calls) fail("a capture ran its body on a dead stream");
    EXPECT_REASON(if (cpool_stream_native(h)) fail("cpool_stream_native of a dead stream"));
    if (pi >= 0) {
        EXPECT_DEAD(cpool_alloc(p, 64, h, &ptr));
        if (ptr != &local) fail("a refused cpool_alloc wrote its output");
        int ai = pick_alloc(b, true);
        if (ai >= 0 && A[ai].pool == pi) EXPECT_DEAD(cpool_free(p, A[ai].ptr, h));
        if (P[pi].nparams) EXPECT_DEAD(cpool_param_set(P[pi].params[b % P[pi].nparams].prm, &local, 1, h));
    }
    int gi = pick_graph(b);
    if (gi >= 0) {
        EXPECT_DEAD(cpool_graph_launch(G[gi].g, h));
        EXPECT_DEAD(cpool_graph_upload(G[gi].g, h));
        EXPECT_DEAD(cpool_graph_update(G[gi].g, h, dummy_body, NULL));
        if (dummy_body_calls) fail("cpool_graph_update ran its body on a dead stream");
    }
    EXPECT_REASON(cpool_stream_destroy(h));
}

/* Calls with dead handles (a released pool or graph, a destroyed stream,
 * perhaps with their memory in a new handle now), or a release of a pool
 * the callers hold no reference to any more while a graph or capture still
 * does: refused, and no statistic or replay count changes. */
void op_dead(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    cpool_pool_stats before[NPOOL];
    uint64_t replays[NGRAPH];
    for (int pi = 0; pi < NPOOL; pi++)
        if (P[pi].state == SLOT_LIVE) before[pi] = stats_of(pi);
    for (int gi = 0; gi < NGRAPH; gi++) replays[gi] = G[gi].g ? cpool_graph_replays(G[gi].g) : 0;
    unsigned which = v % 4;
    void **ring = which == 0 ? dead_pools : which == 1 ? dead_graphs : dead_streams;
    unsigned n = which == 0 ? ndead_pools : which == 1 ? ndead_graphs : ndead_streams;
    void *h = NULL;
    if (which < 3 && n) h = ring[(n - 1 - b % (n < NDEAD ? n : NDEAD)) % NDEAD];
    switch (which) {
    case 0: {
        if (!h) return;
        TRACE("calls with dead pool handle %p on stream %d\n", h, s);
        probe_dead_pool(h, S[s]);
        cpool_graph *g = NULL;
        EXPECT_DEAD(cpool_capture_begin(S[s], h, CPOOL_CAPTURE_GLOBAL));
        dummy_body_calls = 0;
        EXPECT_DEAD(cpool_capture(S[s], h, CPOOL_CAPTURE_GLOBAL, dummy_body, NULL, &g));
        EXPECT_DEAD(cpool_graphed_call(S[s], h, CPOOL_CAPTURE_GLOBAL, 1, dummy_body, NULL, &g));
        if (dummy_body_calls) fail("a capture ran its body with a dead pool");
        break;
    }
    case 1:
        if (!h) return;
        TRACE("calls with dead graph handle %p on stream %d\n", h, s);
        probe_dead_graph(h, s);
        break;
    case 2:
        if (!h) return;
        TRACE("calls with dead stream handle %p\n", h);
        probe_dead_stream(h, s, b);
        break;
    default: { /* a release beyond the callers' references */
        int pi = -1;
        for (int k = 0; k < NPOOL && pi < 0; k++) {
            const mpool *m = &P[(b + k) % NPOOL];
            if (m->state == SLOT_LIVE && m->harness == 0 && m->cb_refs == 0 && m->graph_holds + m->capture_holds > 0)
                pi = (b + k) % NPOOL;
        }
        if (pi < 0) return;
        TRACE("release of pool #%u, which only graphs or captures hold\n", P[pi].uid);
        EXPECT_REASON(cpool_pool_release(P[pi].p));
        break;
    }
    }
    for (int pi = 0; pi < NPOOL; pi++) {
        if (P[pi].state != SLOT_LIVE) continue;
        cpool_pool_stats after = stats_of(pi);
        if (memcmp(&before[pi], &after, sizeof after))
            fail("pool #%u: calls with dead handles (or a release too many) changed its statistics", P[pi].uid);
    }
    for (int gi = 0; gi < NGRAPH; gi++)
        if (G[gi].g && cpool_graph_replays(G[gi].g) != replays[gi])
            fail("graph %d: calls with dead handles changed its replay count", gi);
}

/* ---- operations: NULL arguments, queries, devices, versions ---------------------- */

void op_misc(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    TRACE("misc %d\n", v % 8);
    switch (v % 8) {
    case 0: {
        cpool_device *d = NULL;
        EXPECT_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &d));
        if (d != dev) fail("opening the host device again gave another device");
        cpool_device_close(d);
        EXPECT_OK(cpool_device_open(CPOOL_BACKEND_AUTO, 0, &d));
        if (cpool_device_backend(d) == CPOOL_BACKEND_HOST && d != dev) fail("AUTO opened another host device");
        cpool_device_close(d);
        EXPECT(cpool_device_open(CPOOL_BACKEND_HOST, 1, &d), CPOOL_ERR_NO_DEVICE);
        EXPECT(cpool_device_open(CPOOL_BACKEND_HOST, -1, &d), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_device_open((cpool_backend)99, 0, &d), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_device_open(CPOOL_BACKEND_HOST, 0, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        if (cpool_device_backend(dev) != CPOOL_BACKEND_HOST || cpool_device_backend(NULL) != CPOOL_BACKEND_AUTO)
            fail("cpool_device_backend");
        cpool_device_close(NULL);
        break;
    }
    case 1: {
        cpool_stream *w = NULL;
        EXPECT(cpool_stream_wrap(dev, NULL, &w), CPOOL_ERR_UNSUPPORTED);
        if (w) fail("a failed cpool_stream_wrap set its output");
        EXPECT(cpool_stream_create(NULL, &w), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_stream_create(dev, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        if (cpool_stream_native(S[s]) || cpool_stream_native(NULL)) fail("cpool_stream_native on the host backend");
        EXPECT(cpool_stream_synchronize(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        cpool_stream_destroy(NULL);
        break;
    }
    case 2: {
        for (int i = -1; i <= 12; i++)
            if (!cpool_status_string((cpool_status)i)) fail("cpool_status_string(%d) is NULL", i);
        char want[32];
        snprintf(want, sizeof want, "%d.%d.%d", CPOOL_VERSION_MAJOR, CPOOL_VERSION_MINOR, CPOOL_VERSION_PATCH);
        if (strcmp(cpool_version_string(), want) != 0) fail("cpool_version_string is %s", cpool_version_string());
        if (cpool_version() != CPOOL_VERSION_NUMBER) fail("cpool_version is %u", cpool_version());
        if (!cpool_last_error()) fail("cpool_last_error is NULL");
        break;
    }
    case 3: {
        int gi = pick_graph(b);
        if (gi < 0) break;
        mgraph *g = &G[gi];
        cpool_pool *bound = g->bound >= 0 ? P[g->bound].p : NULL;
        if (cpool_graph_pool(g->g) != bound) fail("cpool_graph_pool");
        if (g->bound >= 0 && P[g->bound].state == SLOT_LIVE && !P[g->bound].records_unknown && !nest_risk(&P[g->bound]) &&
            cpool_graph_pool_buffer_count(g->g) != P[g->bound].records)
            fail("cpool_graph_pool_buffer_count");
        if (g->bound < 0 && cpool_graph_pool_buffer_count(g->g) != 0) fail("cpool_graph_pool_buffer_count without pool");
        if (cpool_graph_native(g->g) || cpool_graph_native(NULL)) fail("cpool_graph_native on the host backend");
        if (cpool_graph_replays(NULL) || cpool_graph_pool(NULL) || cpool_graph_pool_buffer_count(NULL))
            fail("graph queries on NULL");
        if (v & 8) EXPECT_OK(cpool_graph_dump_dot(g->g, "/dev/null"));
        EXPECT(cpool_graph_dump_dot(g->g, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_graph_dump_dot(NULL, "/dev/null"), CPOOL_ERR_INVALID_ARGUMENT);
        break;
    }
    case 4: { /* NULL arguments on pool calls: refused, nothing changes */
        int pi = pick_pool(b);
        if (cpool_pool_retain(NULL) || cpool_pool_is_sealed(NULL) || cpool_pool_buffer_count(NULL))
            fail("pool queries on NULL");
        cpool_pool_release(NULL);
        cpool_pool_seal(NULL);
        cpool_pool_unseal(NULL);
        cpool_pool_clear_buffers(NULL);
        cpool_pool *p = NULL;
        EXPECT(cpool_pool_create(NULL, NULL, &p), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_pool_create(dev, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        void *ptr = NULL;
        EXPECT(cpool_alloc(NULL, 16, S[s], &ptr), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_free(NULL, &ptr, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_pool_record(NULL, &ptr, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_pool_trim(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        cpool_param *prm = NULL;
        EXPECT(cpool_param_create(NULL, 16, &prm), CPOOL_ERR_INVALID_ARGUMENT);
        if (cpool_param_device_ptr(NULL)) fail("cpool_param_device_ptr(NULL)");
        cpool_pool_stats st = {.struct_size = sizeof st};
        EXPECT(cpool_pool_get_stats(NULL, &st), CPOOL_ERR_INVALID_ARGUMENT);
        if (pi < 0) break;
        cpool_pool_stats before = stats_of(pi);
        EXPECT(cpool_alloc(P[pi].p, 16, NULL, &ptr), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_alloc(P[pi].p, 16, S[s], NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_param_create(P[pi].p, 16, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        cpool_pool_stats after = stats_of(pi);
        if (memcmp(&before, &after, sizeof before)) fail("pool calls refused for NULL arguments changed the pool");
        break;
    }
    case 5: { /* capture and graph calls with NULL arguments */
        cpool_capture_state cs;
        cpool_graph *g = NULL;
        EXPECT(cpool_capture_status(NULL, &cs), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_capture_status(S[s], NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_capture_begin(NULL, NULL, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_capture_end(NULL, &g), CPOOL_ERR_INVALID_ARGUMENT);
        dummy_body_calls = 0;
        EXPECT(cpool_capture(NULL, NULL, CPOOL_CAPTURE_GLOBAL, dummy_body, NULL, &g), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_capture(S[s], NULL, CPOOL_CAPTURE_GLOBAL, NULL, NULL, &g), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_capture(S[s], NULL, CPOOL_CAPTURE_GLOBAL, dummy_body, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_graphed_call(S[s], NULL, CPOOL_CAPTURE_GLOBAL, 1, dummy_body, NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_graphed_call(NULL, NULL, CPOOL_CAPTURE_GLOBAL, 1, dummy_body, NULL, &g), CPOOL_ERR_INVALID_ARGUMENT);
        if (dummy_body_calls) fail("a body ran for a call refused for its arguments");
        EXPECT(cpool_graph_launch(NULL, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_graph_upload(NULL, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        int gi = pick_graph(b);
        if (gi >= 0) {
            EXPECT(cpool_graph_launch(G[gi].g, NULL), CPOOL_ERR_INVALID_ARGUMENT);
            EXPECT(cpool_graph_update(G[gi].g, S[s], NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
            EXPECT(cpool_graph_update(G[gi].g, NULL, dummy_body, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        }
        EXPECT(cpool_graph_update(NULL, S[s], dummy_body, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        if (dummy_body_calls) fail("a body ran for a call refused for its arguments");
        if (cpool_graph_retain(NULL)) fail("cpool_graph_retain(NULL)");
        cpool_graph_release(NULL);
        break;
    }
    case 6: { /* zero-byte and NULL stream work */
        EXPECT_OK(cpool_memset_async(S[s], NULL, 0, 0));
        EXPECT_OK(cpool_memcpy_async(S[s], NULL, NULL, 0));
        EXPECT(cpool_memset_async(S[s], NULL, 0, 16), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_memcpy_async(S[s], NULL, &b, 1), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_memcpy_async(S[s], &b, NULL, 1), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_memset_async(NULL, &b, 0, 1), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_memcpy_async(NULL, &b, &b, 1), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_launch_host(NULL, fn_marker, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        break;
    }
    default: { /* capture states, and capture_end on a stream that is not capturing */
        for (int i = 0; i < NS; i++)
            if (S[i] && !C[i].active) do_capture_end(i);
        break;
    }
    }
}
