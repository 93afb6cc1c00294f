/*
 * ops_suspend.c: the fuzz_api harness's suspend and resume (declared in
 * ops.h): a suspend in either mode, checked while suspended (stats,
 * snapshot, the calls it refuses, frees), then a release, a resume, or the
 * pool left suspended for the operations that follow (op_suspend); a
 * resume of such a pool (op_resume); the refusals of both.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: suspend and resume --------------------------------------------------- */

static uint64_t hash_ends(const void *ptr, size_t size) {
    const unsigned char *p = ptr;
    size_t head = size < 4096 ? size : 4096, tail = size - head < 4096 ? size - head : 4096;
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < head; i++) h = (h ^ p[i]) * 1099511628211u;
    for (size_t i = size - tail; i < size; i++) h = (h ^ p[i]) * 1099511628211u;
    return h;
}

/* A live stream taking part in no capture: s if it is one, else a fixed
 * one; -1 when every fixed stream captures. */
static int idle_stream(int s) {
    if (S[s] && !in_capture(s)) return s;
    for (int k = 0; k < NFIXED; k++)
        if (!in_capture(k)) return k;
    return -1;
}

static bool graph_holds_pool(const mgraph *g, int pi) {
    for (int i = 0; i < g->nh; i++)
        if (g->h[i].pool == pi) return true;
    return false;
}

static void expect_stats_kept(int pi, const cpool_pool_stats *before, const char *what) {
    cpool_pool_stats now = stats_of(pi);
    if (memcmp(before, &now, sizeof now)) fail("pool #%u: %s changed the statistics", P[pi].uid, what);
}

/* Every call that a suspended pool refuses with CPOOL_ERR_SUSPENDED (on
 * stream s, or on one that does not capture): nothing changes, no graph
 * replays, no capture begins. */
static void probe_suspended(int pi, int s, uint8_t b) {
    mpool *m = &P[pi];
    cpool_pool_stats before = stats_of(pi);
    int local[4] = {0};
    void *ptr = local;
    const char *what = m->sealed ? "cpool_alloc (a suspended, sealed pool)" : "cpool_alloc (a suspended pool)";
    cpool_status st = cpool_alloc(m->p, 1 + (size_t)b * 64, S[s], &ptr);
    if (m->sealed)
        expect_one_of(st, CPOOL_ERR_SEALED, CPOOL_ERR_SUSPENDED, what);
    else
        check_status(st, CPOOL_ERR_SUSPENDED, what, true);
    st = cpool_alloc_output(m->p, 256, S[s], &ptr);
    if (m->sealed)
        expect_one_of(st, CPOOL_ERR_SEALED, CPOOL_ERR_SUSPENDED, "cpool_alloc_output (a suspended, sealed pool)");
    else
        check_status(st, CPOOL_ERR_SUSPENDED, "cpool_alloc_output (a suspended pool)", true);
    if (ptr != local) fail("a refused cpool_alloc wrote its output");
    cpool_param *prm = NULL;
    st = cpool_param_create(m->p, 64, &prm);
    if (m->sealed)
        expect_one_of(st, CPOOL_ERR_SEALED, CPOOL_ERR_SUSPENDED, "cpool_param_create (a suspended, sealed pool)");
    else
        check_status(st, CPOOL_ERR_SUSPENDED, "cpool_param_create (a suspended pool)", true);
    if (prm) fail("a refused cpool_param_create wrote its output");
    int t = idle_stream(s);
    if (t < 0) {
        expect_stats_kept(pi, &before, "a refused allocation");
        return;
    }
    /* Sets of its parameter blocks, copies and sets on a live block's first
     * and last byte. */
    if (m->nparams) {
        const mparam *q = &m->params[b % m->nparams];
        TRACE("param_set of #%u (suspended) on stream %d\n", m->uid, t);
        EXPECT(cpool_param_set(q->prm, local, q->size < sizeof local ? q->size : sizeof local, S[t]), CPOOL_ERR_SUSPENDED);
    }
    for (int k = 0; k < NALLOC; k++) {
        const malloc_t *a = &A[(b + k) % NALLOC];
        if (!a->live || a->pool != pi) continue;
        char *last = (char *)a->ptr + a->size - 1;
        size_t n = a->size < sizeof local ? a->size : sizeof local;
        TRACE("memset and memcpy of %p (%zu bytes, suspended) on stream %d\n", a->ptr, a->size, t);
        EXPECT(cpool_memset_async(S[t], a->ptr, 0x3C, n), CPOOL_ERR_SUSPENDED);
        EXPECT(cpool_memset_async(S[t], last, 0x3C, 1), CPOOL_ERR_SUSPENDED);
        EXPECT(cpool_memcpy_async(S[t], local, a->ptr, n), CPOOL_ERR_SUSPENDED);
        EXPECT(cpool_memcpy_async(S[t], last, local, 1), CPOOL_ERR_SUSPENDED);
        break;
    }
    /* Launches and uploads of the graphs that hold it (a stale one may say
     * so first). */
    for (int gi = 0; gi < NGRAPH; gi++) {
        mgraph *g = &G[gi];
        if (!g->g || !graph_holds_pool(g, pi)) continue;
        for (int upload = 0; upload < 2; upload++) {
            const char *call = upload ? "cpool_graph_upload (a suspended pool)" : "cpool_graph_launch (a suspended pool)";
            TRACE("%s graph %d on stream %d\n", call, gi, t);
            st = upload ? cpool_graph_upload(g->g, S[t]) : cpool_graph_launch(g->g, S[t]);
            if (staleness(g) == FRESH)
                check_status(st, CPOOL_ERR_SUSPENDED, call, true);
            else
                expect_one_of(st, CPOOL_ERR_SUSPENDED, CPOOL_ERR_STALE_GRAPH, call);
            if (st == CPOOL_ERR_STALE_GRAPH) g->known_stale = true;
        }
        if (cpool_graph_replays(g->g) != g->replays)
            fail("graph %d: replayed while a pool it holds is suspended (%llu replays, %llu expected)", gi,
                 (unsigned long long)cpool_graph_replays(g->g), (unsigned long long)g->replays);
    }
    /* Captures that would hold it. */
    TRACE("capture_begin and cpool_capture on stream %d with suspended #%u\n", t, m->uid);
    EXPECT(cpool_capture_begin(S[t], m->p, CPOOL_CAPTURE_GLOBAL), CPOOL_ERR_SUSPENDED);
    cpool_graph *g = NULL;
    int calls = dummy_body_calls;
    EXPECT(cpool_capture(S[t], m->p, CPOOL_CAPTURE_THREAD_LOCAL, dummy_body, NULL, &g), CPOOL_ERR_SUSPENDED);
    if (g || dummy_body_calls != calls) fail("a cpool_capture refused for a suspended pool ran its body or made a graph");
    expect_stats_kept(pi, &before, "a call refused for a suspended pool");
}

/* What a suspend must refuse: NULL, a mode outside the enum, a pool of
 * plain segments (which cannot keep its addresses); a resume of a pool that
 * is not suspended changes nothing. */
static void suspend_refusals(uint8_t b, int s) {
    TRACE("suspend and resume refusals\n");
    EXPECT(cpool_pool_suspend(NULL, CPOOL_SUSPEND_KEEP_CONTENTS), CPOOL_ERR_INVALID_ARGUMENT);
    EXPECT(cpool_pool_resume(NULL), CPOOL_ERR_INVALID_ARGUMENT);
    if (cpool_pool_is_suspended(NULL)) fail("cpool_pool_is_suspended(NULL) is true");
    int pi = pick_pool(b);
    if (pi >= 0) {
        cpool_pool_stats before = stats_of(pi);
        EXPECT(cpool_pool_suspend(P[pi].p, (cpool_suspend_mode)(2 + b % 8)), CPOOL_ERR_INVALID_ARGUMENT);
        if (!P[pi].suspended) EXPECT_OK(cpool_pool_resume(P[pi].p)); /* not suspended: nothing to do */
        expect_stats_kept(pi, &before, "a refused suspend or a resume of a pool not suspended");
    }
    cpool_pool_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.plain_segments = true;
    o.reserve_bytes = b & 1 ? 2 * MIB : 0;
    cpool_pool *plain = NULL;
    EXPECT_OK(cpool_pool_create(dev, &o, &plain));
    if (cpool_pool_grows_in_place(plain)) fail("a pool of plain segments grows in place");
    int t = idle_stream(s);
    void *ptr = NULL;
    if (t >= 0 && (b & 2)) EXPECT_OK(cpool_alloc(plain, 4096, S[t], &ptr));
    EXPECT(cpool_pool_suspend(plain, b & 4 ? CPOOL_SUSPEND_DISCARD : CPOOL_SUSPEND_KEEP_CONTENTS),
           CPOOL_ERR_UNSUPPORTED);
    if (cpool_pool_is_suspended(plain)) fail("a refused suspend left the pool suspended");
    if (ptr) {
        void *more = NULL;
        EXPECT_OK(cpool_alloc(plain, 512, S[t], &more)); /* still has its memory */
        EXPECT_OK(cpool_free(plain, more, S[t]));
        EXPECT_OK(cpool_free(plain, ptr, S[t]));
    }
    before_blocking();
    cpool_pool_release(plain);
}

/* Resumes suspended pool pi and checks that it maps back what its
 * snapshot said (with `exact`, the stats of before the suspend, which was
 * trimmed first and saw no free: every figure of device memory), and that
 * the blocks' memory, with KEEP_CONTENTS their bytes too, came back. */
static void resume_checked(int pi, const cpool_pool_stats *exact) {
    mpool *m = &P[pi];
    resident_memory res;
    check_snapshot(pi, &res);
    cpool_pool_stats mid = stats_of(pi);
    TRACE("resume #%u\n", m->uid);
    EXPECT_OK(cpool_pool_resume(m->p));
    m->suspended = false;
    check_pool(pi);
    cpool_pool_stats after = stats_of(pi);
    /* A graph output freed while suspended may give its page back to
     * sharing at the first settle after the resume (the stats above), and
     * a graph released while suspended its idle arena: at most what the
     * snapshot said, then (graph_count only goes down while suspended). */
    bool less_ok = m->output_freed_suspended || after.graph_count < m->graphs_at_suspend;
    if (less_ok ? after.reserved_bytes > res.reserved || after.graph_reserved_bytes > res.graph ||
                      after.segment_count > res.segments ||
                      res.reserved - after.reserved_bytes != res.graph - after.graph_reserved_bytes
                : after.reserved_bytes != res.reserved || after.graph_reserved_bytes != res.graph ||
                      after.segment_count != res.segments)
        fail("pool #%u: resumed with reserved %llu in %llu segments, graph %llu; suspended it said %llu in %llu, graph "
             "%llu",
             m->uid, (unsigned long long)after.reserved_bytes, (unsigned long long)after.segment_count,
             (unsigned long long)after.graph_reserved_bytes, (unsigned long long)res.reserved,
             (unsigned long long)res.segments, (unsigned long long)res.graph);
    if (after.host_reserved_bytes != mid.host_reserved_bytes || after.reserved_bytes_peak != mid.reserved_bytes_peak)
        fail("pool #%u: a resume changed host_reserved_bytes (%llu, %llu before) or the peak (%llu, %llu before)",
             m->uid, (unsigned long long)after.host_reserved_bytes, (unsigned long long)mid.host_reserved_bytes,
             (unsigned long long)after.reserved_bytes_peak, (unsigned long long)mid.reserved_bytes_peak);
    if (exact && (after.reserved_bytes != exact->reserved_bytes || after.graph_reserved_bytes != exact->graph_reserved_bytes ||
                  after.segment_count != exact->segment_count || after.cached_bytes != exact->cached_bytes))
        fail("pool #%u: resumed with reserved %llu, graph %llu, cached %llu in %llu segments; before the suspend (after "
             "a trim) %llu, %llu, %llu in %llu",
             m->uid, (unsigned long long)after.reserved_bytes, (unsigned long long)after.graph_reserved_bytes,
             (unsigned long long)after.cached_bytes, (unsigned long long)after.segment_count,
             (unsigned long long)exact->reserved_bytes, (unsigned long long)exact->graph_reserved_bytes,
             (unsigned long long)exact->cached_bytes, (unsigned long long)exact->segment_count);
    EXPECT_OK(cpool_pool_resume(m->p)); /* not suspended: nothing to do */
    expect_stats_kept(pi, &after, "a resume of a pool not suspended");

    for (int k = 0; k < m->nprobes; k++) {
        const kept_probe *p = &m->probes[k];
        if (!live_start(pi, p->ptr)) continue; /* freed while suspended */
        const volatile unsigned char *bytes = p->ptr;
        unsigned char first = bytes[0], last = bytes[p->size - 1]; /* mapped again, whatever the mode */
        (void)first;
        (void)last;
        if (!m->kept) continue;
        for (size_t i = 0; i < p->head; i++)
            if (bytes[i] != p->value)
                fail("pool #%u: after a KEEP_CONTENTS suspend and resume, byte %zu of %p (%zu bytes) is 0x%02x, "
                     "0x%02x was set before",
                     m->uid, i, p->ptr, p->size, bytes[i], p->value);
        if (p->hashed && hash_ends(p->ptr, p->size) != p->hash)
            fail("pool #%u: after a KEEP_CONTENTS suspend and resume, the bytes of %p (%zu bytes) changed", m->uid,
                 p->ptr, p->size);
    }
    m->nprobes = 0;
}

/* Suspends a pool (KEEP_CONTENTS or DISCARD), checks it while suspended
 * (its stats and snapshot, the calls it refuses, a second suspend and a
 * trim that change nothing), maybe frees some of its blocks, then releases
 * it, leaves it suspended for the ops that follow (op_resume resumes it),
 * or resumes it. A pool that a capture uses is refused. */
void op_suspend(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r), f = u8(r);
    if (v % 16 == 15) {
        suspend_refusals(b, s);
        return;
    }
    int pi = pick_pool(b);
    if (pi < 0) return;
    mpool *m = &P[pi];
    cpool_suspend_mode mode = v & 1 ? CPOOL_SUSPEND_DISCARD : CPOOL_SUSPEND_KEEP_CONTENTS;
    const char *mode_name = v & 1 ? "DISCARD" : "KEEP_CONTENTS";
    if (m->suspended) { /* left so by an earlier op_suspend: nothing changes */
        TRACE("suspend #%u (%s), suspended already\n", m->uid, mode_name);
        cpool_pool_stats before = stats_of(pi);
        EXPECT_OK(cpool_pool_suspend(m->p, mode));
        expect_stats_kept(pi, &before, "a suspend of a suspended pool");
        probe_suspended(pi, s, b);
        return;
    }
    bool trim_first = v & 2, release = (v & 12) == 12, stay = (v & 96) == 96;
    int nfree = f % 4;
    if (m->capture_holds > 0) {
        TRACE("suspend #%u (%s) while a capture uses it\n", m->uid, mode_name);
        cpool_pool_stats before = stats_of(pi);
        EXPECT(cpool_pool_suspend(m->p, mode), CPOOL_ERR_INVALID_ARGUMENT);
        expect_stats_kept(pi, &before, "a suspend refused for a capture");
        return;
    }
    TRACE("suspend #%u (%s%s), then %d frees and %s\n", m->uid, mode_name, trim_first ? ", trimmed first" : "", nfree,
          release ? "a release" : stay ? "left suspended" : "resume");
    m->nprobes = 0;
    for (int k = 0; k < NALLOC && m->nprobes < NPROBE; k++) {
        const malloc_t *a = &A[(f + k) % NALLOC];
        if (!a->live || a->pool != pi) continue;
        kept_probe *p = &m->probes[m->nprobes++];
        *p = (kept_probe){.ptr = a->ptr, .size = a->size};
        int t = a->stream;
        if (!a->graph && t >= 0 && S[t] && !in_capture(t)) {
            p->value = (unsigned char)(1 + (f * 7u + (unsigned)m->nprobes) % 255);
            p->head = a->size < 1024 ? a->size : 1024;
            EXPECT_OK(cpool_memset_async(S[t], a->ptr, p->value, p->head));
        }
    }
    if (trim_first) {
        do_trim(pi, "cpool_pool_trim (before a suspend)");
        for (int k = 0; k < m->nprobes; k++) { /* nothing runs now */
            m->probes[k].hashed = true;
            m->probes[k].hash = hash_ends(m->probes[k].ptr, m->probes[k].size);
        }
    }
    cpool_pool_stats before = stats_of(pi);
    before_blocking();
    EXPECT_OK(cpool_pool_suspend(m->p, mode));
    check_quiesced("cpool_pool_suspend");
    m->suspended = true;
    m->output_freed_suspended = false;
    m->kept = mode == CPOOL_SUSPEND_KEEP_CONTENTS;
    if (m->graph_holds == 0) m->ngr = 0; /* it trimmed first, as cpool_pool_trim: graph memory is general again */
    check_pool(pi);
    cpool_pool_stats during = stats_of(pi);
    m->graphs_at_suspend = during.graph_count;
    /* The host copy holds the live bytes and the small gaps copied with
     * them: at least what is kept; the copy made before stays if large
     * enough, else a new one is made (never for DISCARD). */
    bool host_ok = m->kept && during.host_kept_bytes > before.host_reserved_bytes
                       ? during.host_reserved_bytes >= during.host_kept_bytes
                       : !m->kept ? during.host_reserved_bytes == before.host_reserved_bytes
                                  : during.host_reserved_bytes >= before.host_reserved_bytes;
    if (!host_ok)
        fail("pool #%u: suspended (%s) with host_reserved_bytes %llu: %llu before, %llu kept", m->uid, mode_name,
             (unsigned long long)during.host_reserved_bytes, (unsigned long long)before.host_reserved_bytes,
             (unsigned long long)during.host_kept_bytes);
    if (during.reserved_bytes_peak != before.reserved_bytes_peak || during.allocated_bytes_peak != before.allocated_bytes_peak)
        fail("pool #%u: a suspend changed a peak", m->uid);

    /* Suspended: a second suspend (either mode) and a trim change nothing. */
    EXPECT_OK(cpool_pool_suspend(m->p, v & 16 ? CPOOL_SUSPEND_DISCARD : CPOOL_SUSPEND_KEEP_CONTENTS));
    expect_stats_kept(pi, &during, "a suspend of a suspended pool");
    before_blocking();
    EXPECT_OK(cpool_pool_trim(m->p));
    check_quiesced("cpool_pool_trim (suspended)");
    expect_stats_kept(pi, &during, "a trim of a suspended pool");
    probe_suspended(pi, s, b);

    /* Frees work while suspended. */
    int freed = 0;
    for (int k = 0; k < NALLOC && freed < nfree; k++) {
        int ai = (f * 13 + k) % NALLOC;
        const malloc_t *a = &A[ai];
        if (!a->live || a->pool != pi) continue;
        int t = !a->graph && a->stream >= 0 && S[a->stream] && !in_capture(a->stream) ? a->stream : idle_stream(s);
        if (t < 0) break;
        TRACE("free while suspended:\n");
        do_free_on(ai, t, t);
        freed++;
    }
    if (freed) check_pool(pi);
    resident_memory res;
    check_snapshot(pi, &res);
    if (res.reserved > before.reserved_bytes || res.graph > before.graph_reserved_bytes)
        fail("pool #%u: its suspend grew its memory: reserved %llu (%llu before), graph %llu (%llu before)", m->uid,
             (unsigned long long)res.reserved, (unsigned long long)before.reserved_bytes,
             (unsigned long long)res.graph, (unsigned long long)before.graph_reserved_bytes);
    if (trim_first && !freed &&
        (res.reserved != before.reserved_bytes || res.graph != before.graph_reserved_bytes ||
         res.segments != before.segment_count))
        fail("pool #%u: after a trim, a suspend trimmed more: reserved %llu in %llu segments, graph %llu (before: %llu "
             "in %llu, graph %llu)",
             m->uid, (unsigned long long)res.reserved, (unsigned long long)res.segments, (unsigned long long)res.graph,
             (unsigned long long)before.reserved_bytes, (unsigned long long)before.segment_count,
             (unsigned long long)before.graph_reserved_bytes);

    /* The last reference may go while suspended (graphs holding it would
     * keep it suspended: not then). */
    if (release && m->harness == 1 && m->graph_holds == 0) {
        TRACE("release #%u while suspended\n", m->uid);
        release_pool_ref(pi);
        return;
    }
    if (stay) return; /* a later op_suspend on it resumes it; the ops in between meet it suspended */
    resume_checked(pi, trim_first && !freed ? &before : NULL);
}

/* Resumes a pool that op_suspend left suspended; a resume of one that is
 * not changes nothing. */
void op_resume(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    if (P[pi].suspended) {
        resume_checked(pi, NULL);
        return;
    }
    TRACE("resume #%u, not suspended\n", P[pi].uid);
    cpool_pool_stats before = stats_of(pi);
    EXPECT_OK(cpool_pool_resume(P[pi].p));
    expect_stats_kept(pi, &before, "a resume of a pool not suspended");
}
