/*
 * model.c: the fuzz_api harness's model of the library and the checks of
 * the library against it (declared in model.h).
 *
 * - Trace and status checks: fail, check_status, expect_one_of.
 * - Process-wide state: the device, the streams, the host tasks enqueued
 *   and done on each, the gates and when to open them (before_blocking),
 *   and that a call waited for the device (check_quiesced).
 * - The model's tables (pools, allocations, captures, graphs, pending
 *   callbacks, recorded objects, dead handles) and the picks of a live slot
 *   from an input byte.
 * - Bookkeeping: objects that may be dropped and the checks that they were
 *   (mark_droppable, verify_dropped, run_verifies); pool references held
 *   by the harness, captures and graphs (pool_refs_changed, hold,
 *   graph_from_capture, graph_store).
 * - Checks of the library against the model: each pool's statistics
 *   (check_pool, check_all), every new block (no overlap, stream order,
 *   graph-reserved memory), failed allocations.
 * Nothing here decodes an operation: that is the ops_*.c files'.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"
/* cpool__pool_check */
#include "internal.h"
#include "model.h"

/* ---- trace and status checks ------------------------------------------------- */

bool trace;

__attribute__((noreturn, format(printf, 1, 2))) void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz_api: VIOLATION: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  (cpool_last_error on this thread: \"%s\")\n", cpool_last_error());
    abort();
}

void check_status(cpool_status got, cpool_status want, const char *what, bool library_failure) {
    if (!cpool_status_string(got)) fail("%s: cpool_status_string(%d) is NULL", what, (int)got);
    if (got != want)
        fail("%s: returned %s (%d), expected %s (%d)", what, cpool_status_string(got), (int)got,
             cpool_status_string(want), (int)want);
    if (library_failure && got != CPOOL_OK && !cpool_last_error()[0])
        fail("%s: failed with %s but cpool_last_error() is empty", what, cpool_status_string(got));
}

/* A successful call leaves cpool_last_error() as it was (header). */
void check_error_kept(const char *before, const char *what) {
    if (strcmp(before, cpool_last_error()) != 0)
        fail("%s succeeded but changed cpool_last_error() from \"%s\" to \"%s\"", what, before, cpool_last_error());
}

void expect_one_of(cpool_status got, cpool_status a, cpool_status b, const char *what) {
    if (got != a && got != b)
        fail("%s: returned %s (%d), expected %s or %s", what, cpool_status_string(got), (int)got,
             cpool_status_string(a), cpool_status_string(b));
    if (got != CPOOL_OK && !cpool_last_error()[0])
        fail("%s: failed with %s but cpool_last_error() is empty", what, cpool_status_string(got));
}

/* ---- process-wide state: device, streams, gates ---------------------------- */

cpool_device *dev;
cpool_stream *S[NS];
pthread_t main_thread;

/* Host tasks the harness enqueued outside capture on each stream (enq) and
 * how many of them finished (done). A drop must not run before the tasks
 * enqueued before the call that drops have finished. */
uint64_t enq[NS];
_Atomic uint64_t done[NS];
uint64_t snap[NS]; /* enq at the last call that may drop or wait */

pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
uint64_t gate_closed[NS], gate_opened[NS]; /* under gate_mu */

/* The temporary stream after a destroy that may still run (op_temp_dying):
 * its handle is gone from S[TEMP], but its work and the memory freed on it
 * are still tracked until reap_temp() knows the destroy finished. While
 * timed_epoch is set, open_gates() leaves that gate of the temporary stream
 * closed: it opens by itself after a few milliseconds. */
bool temp_dying;
uint64_t timed_epoch;

/* Streams whose work the model follows: the live ones and a dying one. */
bool tracked(int s) { return S[s] || (s == TEMP && temp_dying); }

void open_gates(void) {
    pthread_mutex_lock(&gate_mu);
    bool any = false;
    for (int s = 0; s < NS; s++) {
        uint64_t upto = gate_closed[s];
        if (s == TEMP && timed_epoch) upto = timed_epoch - 1; /* that one opens by itself */
        if (gate_opened[s] < upto) {
            gate_opened[s] = upto;
            any = true;
        }
    }
    if (any) pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

bool stream_held(int s) {
    bool held = false;
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS && !held; x++) {
        uint64_t g = x == s ? gate_closed[s] : dep_gate[s][x];
        if (gate_opened[x] < g) held = true;
    }
    pthread_mutex_unlock(&gate_mu);
    return held;
}

mevent E[NEVENT];
uint64_t dep_gate[NS][NS], dep_mark[NS][NS];
void *dead_events[NDEAD];
unsigned ndead_events;

void events_synced(int s) {
    for (int i = 0; i < NEVENT; i++)
        if (E[i].e && E[i].recorded && E[i].stream == s) E[i].complete = true;
}

void events_temp_gone(void) {
    events_synced(TEMP);
    for (int i = 0; i < NEVENT; i++) E[i].gates[TEMP] = E[i].marks[TEMP] = 0;
    for (int x = 0; x < NS; x++) {
        dep_gate[x][TEMP] = dep_mark[x][TEMP] = 0;
        dep_gate[TEMP][x] = dep_mark[TEMP][x] = 0;
    }
}

/* Before any call that may wait for stream work (or drop objects). */
void before_blocking(void) {
    open_gates();
    for (int s = 0; s < NS; s++) snap[s] = enq[s];
}

/* After a call that waits for the device (a trim, a pool's teardown): the
 * work enqueued before it on every stream, a dying one too, has run. */
void check_quiesced(const char *what) {
    for (int s = 0; s < NS; s++)
        if (tracked(s) && atomic_load(&done[s]) < snap[s])
            fail("%s returned while stream %d%s still runs work enqueued before the call (%llu of %llu done)", what, s,
                 S[s] ? "" : " (destroyed, its work pending)", (unsigned long long)atomic_load(&done[s]),
                 (unsigned long long)snap[s]);
}

/* ---- the model's tables ------------------------------------------------------ */

mpool P[NPOOL];
malloc_t A[NALLOC + 1]; /* the last one only for an immediate free */
mcapture C[NS];
mgraph G[NGRAPH + 1]; /* the last one only for an immediate release */
pending_cb pend[NPENDING];
int npend;
freed_ptr ring[NFREED];
unsigned ring_next;
tick *ticks;
unsigned next_uid;
uint64_t cap_serial;
static int verify_uids[4 * NPOOL];
static cpool_pool *verify_handles[4 * NPOOL];
int nverify;
static int handed_off_uids[4 * NPOOL];
static int nhanded_off;

/* Handles known to be dead (released, destroyed), newest last, for op_dead. */
void *dead_pools[NDEAD], *dead_graphs[NDEAD], *dead_streams[NDEAD];
unsigned ndead_pools, ndead_graphs, ndead_streams;

/* Counted by drops, read by the harness's thread: nested clears made by
 * drops while their pool was live, and the pool references that objects of
 * kind DROP_RELEASE still hold. */
_Atomic uint64_t nested_clears[NUID];
atomic_int drop_refs[NUID];

pthread_mutex_t drop_mu = PTHREAD_MUTEX_INITIALIZER;
obj objs[NOBJ]; /* under drop_mu */
int nobj;
uint64_t next_serial[NUID], last_dropped[NUID];

bool usable(int pi) { return pi >= 0 && pi < NPOOL && P[pi].state == SLOT_LIVE && P[pi].harness > 0; }

int pick_pool(uint8_t b) {
    for (int k = 0; k < NPOOL; k++) {
        int pi = (b + k) % NPOOL;
        if (usable(pi)) return pi;
    }
    return -1;
}

int pick_resident_pool(uint8_t b) {
    for (int k = 0; k < NPOOL; k++) {
        int pi = (b + k) % NPOOL;
        if (usable(pi) && !P[pi].suspended) return pi;
    }
    return -1;
}

int pick_stream(uint8_t b) { return b % (S[TEMP] ? NS : NFIXED); }

int pick_alloc(uint8_t b, bool pool_usable) {
    for (int k = 0; k < NALLOC; k++) {
        int a = (b + k) % NALLOC;
        if (A[a].live && (!pool_usable || usable(A[a].pool))) return a;
    }
    return -1;
}

int pick_graph(uint8_t b) {
    for (int k = 0; k < NGRAPH; k++) {
        int g = (b + k) % NGRAPH;
        if (G[g].g) return g;
    }
    return -1;
}

static tick *new_tick(void) {
    tick *t = calloc(1, sizeof *t);
    if (!t) abort();
    t->next = ticks;
    ticks = t;
    return t;
}

/* ---- recorded objects: bookkeeping ------------------------------------------ */

/* The objects of pool `uid` not yet dropped may be dropped from now on;
 * `ctx`: whether that will be in a clear or in the final teardown (for the
 * ones not droppable before). */
void mark_droppable(unsigned uid, int ctx) {
    pthread_mutex_lock(&drop_mu);
    for (int i = 0; i < nobj; i++)
        if (objs[i].used && objs[i].uid == uid && !objs[i].drops && !objs[i].droppable) {
            objs[i].droppable = true;
            objs[i].ctx = ctx;
        }
    pthread_mutex_unlock(&drop_mu);
}

/* Every object the pool ever recorded has been dropped once. */
void verify_dropped(unsigned uid, const char *when) {
    pthread_mutex_lock(&drop_mu);
    for (int i = 0; i < nobj; i++)
        if (objs[i].used && objs[i].uid == uid && objs[i].drops != 1)
            fail("%s: object %d of pool #%u (serial %llu) was dropped %d times", when, i, uid,
                 (unsigned long long)objs[i].serial, objs[i].drops);
    pthread_mutex_unlock(&drop_mu);
}

/* A capture's end in a bounded pool may fail for want of room for its
 * outputs' pages (do_capture_end, op_scoped): the capture's references then
 * go inside the call, and a pool whose last reference that was drops its
 * objects there, before the model knows which way the end went. So the
 * objects of the pools in h that nothing else holds may drop from before the
 * call (end_may_drop); once it returned, end_settled takes that back if the
 * end made a graph, which holds those pools (then none may have dropped). */
static bool tentative[NOBJ];

void end_may_drop(const held *h, int nh) {
    pthread_mutex_lock(&drop_mu);
    for (int i = 0; i < nh; i++) {
        const mpool *m = &P[h[i].pool];
        if (m->state != SLOT_LIVE || m->harness + m->graph_holds + m->capture_holds != 1) continue;
        int ctx = !m->deferred && m->pending_clears == 0 ? CTX_DEAD : CTX_UNKNOWN; /* as pool_refs_changed */
        for (int k = 0; k < nobj; k++)
            if (objs[k].used && objs[k].uid == m->uid && !objs[k].drops && !objs[k].droppable) {
                objs[k].droppable = true;
                objs[k].ctx = ctx;
                tentative[k] = true;
            }
    }
    pthread_mutex_unlock(&drop_mu);
}

void end_settled(bool made_graph) {
    pthread_mutex_lock(&drop_mu);
    for (int k = 0; k < NOBJ; k++) {
        if (!tentative[k]) continue;
        tentative[k] = false;
        if (!made_graph) continue;
        if (objs[k].drops)
            fail("object %d (pool #%u, serial %llu) dropped in a capture end that made a graph holding its pool", k,
                 objs[k].uid, (unsigned long long)objs[k].serial);
        objs[k].droppable = false;
    }
    pthread_mutex_unlock(&drop_mu);
}

void push_dead(void **ring, unsigned *n, void *h) { ring[(*n)++ % NDEAD] = h; }

/* After a call that dropped the last reference of the pools in verify_uids
 * on this thread: their objects are dropped, their handles dead, and the
 * teardown waited for the device. */
void run_verifies(void) {
    bool any = nverify > 0;
    for (int i = 0; i < nverify; i++) {
        verify_dropped((unsigned)verify_uids[i], "after the pool's last reference went");
        push_dead(dead_pools, &ndead_pools, verify_handles[i]);
    }
    nverify = 0;
    if (any) check_quiesced("the last release of a pool");
}

/* After cpool_wait_deferred: the pools whose teardown a graph's release
 * handed to the library's thread have dropped every object. */
void verify_handed_off(void) {
    for (int i = 0; i < nhanded_off; i++)
        verify_dropped((unsigned)handed_off_uids[i],
                       "after cpool_wait_deferred, a graph having held the pool's last reference");
    nhanded_off = 0;
}

/* ---- pool references --------------------------------------------------------- */

/* Called after the model dropped a reference of pool pi. If no reference the
 * harness knows of is left, the pool is gone (or will go when the callbacks
 * holding the rest run). `synchronous`: the call that drops it runs on this
 * thread, so its objects must be dropped when it returns. */
void pool_refs_changed(int pi, bool synchronous) {
    mpool *m = &P[pi];
    if (m->state != SLOT_LIVE || m->harness + m->graph_holds + m->capture_holds > 0) return;
    if (atomic_load(&drop_refs[m->uid]) > 0)
        fail("harness model: pool #%u lost its last reference while objects still hold %d", m->uid,
             atomic_load(&drop_refs[m->uid]));
    /* Without a clear that may still run elsewhere, the drops from now on are
     * the final teardown's, with the handle dead. */
    mark_droppable(m->uid, !m->deferred && m->pending_clears == 0 ? CTX_DEAD : CTX_UNKNOWN);
    for (int a = 0; a <= NALLOC; a++)
        if (A[a].live && A[a].pool == pi) A[a].live = false;
    if (m->cb_refs == 0) {
        if (synchronous && !m->deferred && m->pending_clears == 0 && nverify < (int)(sizeof verify_uids / sizeof *verify_uids)) {
            verify_handles[nverify] = m->p;
            verify_uids[nverify++] = (int)m->uid;
        }
        m->state = SLOT_FREE;
    } else {
        m->state = SLOT_ZOMBIE;
    }
}

/* Drops of the pool may be running on another thread (a deferred clear)
 * and clear it again (DROP_CLEAR, DROP_RECORD): its generation and record
 * count are then not known until cpool_wait_deferred. */
bool nest_risk(const mpool *m) { return m->deferred && m->nesters > 0; }

/* Counts the nested clears that drops made into the pool's generation (at a
 * point where no drop of the pool can still be running). */
void absorb_nested(int pi) {
    mpool *m = &P[pi];
    uint64_t n = atomic_load(&nested_clears[m->uid]);
    m->gen += n - m->nested_seen;
    m->nested_seen = n;
}

static void hold(held *h, int *nh, int pi) {
    for (int i = 0; i < *nh; i++)
        if (h[i].pool == pi) return;
    mpool *m = &P[pi];
    uint64_t hi = m->gen + (uint64_t)m->pending_clears;
    if (nest_risk(m)) hi = UINT64_MAX / 2; /* nested clears may have happened, or happen */
    h[(*nh)++] = (held){pi, m->gen, hi};
}

void capture_hold(int s, int pi) {
    mcapture *c = &C[s];
    int before = c->nh;
    hold(c->h, &c->nh, pi);
    if (c->nh == before) return;
    P[pi].capture_holds++;
    /* Cleared since the capture began (a pool made since counts from 0). */
    const mpool *m = &P[pi];
    bool same = c->base_uid[pi] == m->uid;
    uint64_t base = same ? c->base_gen[pi] : 0;
    if ((same && c->base_unsure[pi]) || m->pending_clears || nest_risk(m))
        c->h[c->nh - 1] = (held){pi, 0, UINT64_MAX / 2}; /* stale or not */
    else if (m->gen > base)
        c->h[c->nh - 1] = (held){pi, base, base}; /* stale */
}

/* The fixed streams that ever captured, and how many did so for the first
 * time in this input (finish checks the device's references with it). */
static bool ever_captured[NFIXED];
int first_captures;

void model_capture_begin(int s, int pi, cpool_capture_mode mode) {
    mcapture *c = &C[s];
    if (s < NFIXED && !ever_captured[s]) {
        ever_captured[s] = true;
        first_captures++;
    }
    memset(c, 0, sizeof *c);
    c->active = true;
    c->unjoined = false;
    c->id = ++cap_serial;
    c->bound = pi;
    c->tk = new_tick();
    c->mode = mode;
    for (int q = 0; q < NPOOL; q++) {
        c->base_uid[q] = P[q].uid;
        c->base_gen[q] = P[q].gen;
        c->base_unsure[q] = P[q].pending_clears || nest_risk(&P[q]);
    }
    if (pi >= 0) capture_hold(s, pi);
}

int fork_of[NS] = {-1, -1, -1, -1};

static bool overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn);

void branch_free_noted(int s, int on, int pi, void *ptr, size_t size) {
    mcapture *c = &C[s];
    uint32_t stamp = ++c->vc[on][on];
    if (c->nbf == NBFREE) { /* the oldest goes unchecked */
        memmove(c->bf, c->bf + 1, (NBFREE - 1) * sizeof *c->bf);
        c->nbf--;
    }
    c->bf[c->nbf++] = (branch_free){pi, (uintptr_t)ptr, size, on, stamp};
}

void branch_check_alloc(int s, int on, int pi, void *ptr, size_t size) {
    mcapture *c = &C[s];
    for (int k = 0; k < c->nbf;) {
        branch_free *f = &c->bf[k];
        if (f->pool != pi || !overlaps((uintptr_t)ptr, size, f->addr, f->size)) {
            k++;
            continue;
        }
        if (c->vc[on][f->stream] < f->stamp)
            fail("cpool_alloc on stream %d in a capture: [%p, +%zu) reuses memory freed on stream %d, whose work there "
                 "may run at the same time (free %u of that stream, this one ordered after %u)",
                 on, ptr, size, f->stream, f->stamp, c->vc[on][f->stream]);
        c->bf[k] = c->bf[--c->nbf]; /* superseded by this allocation */
    }
}

void branch_order_after(int s, int x, const uint32_t after[NS]) {
    for (int y = 0; y < NS; y++)
        if (after[y] > C[s].vc[x][y]) C[s].vc[x][y] = after[y];
}

void forks_end(int s) {
    for (int x = 0; x < NS; x++)
        if (fork_of[x] == s) fork_of[x] = -1;
}

/* The capture ends without a graph: its references go. */
void capture_drop(int s, bool synchronous) {
    mcapture *c = &C[s];
    c->active = false;
    forks_end(s);
    for (int i = 0; i < c->nh; i++) {
        P[c->h[i].pool].capture_holds--;
        pool_refs_changed(c->h[i].pool, synchronous);
    }
    c->nh = 0;
}

/* The capture ends with a graph: its references move there. */
mgraph graph_from_capture(int s) {
    mcapture *c = &C[s];
    mgraph g;
    memset(&g, 0, sizeof g);
    g.refs = 1;
    g.nh = c->nh;
    memcpy(g.h, c->h, sizeof g.h);
    g.bound = c->bound;
    g.tk = c->tk;
    g.ticks = c->ticks;
    g.mode = c->mode;
    g.cap_id = c->id;
    for (int i = 0; i < c->nh; i++) {
        P[c->h[i].pool].capture_holds--;
        P[c->h[i].pool].graph_holds++;
    }
    c->active = false;
    forks_end(s);
    c->nh = 0;
    return g;
}

/* A graph's pool references go (its last release, or an update that
 * replaced them). A graph's release never waits: a pool whose last
 * reference that was is torn down by the library's thread, and its objects
 * are checked at the next cpool_wait_deferred (verify_handed_off).
 * `on_this_thread`: the release runs on the harness's thread now, not in a
 * callback later. */
void graph_pools_released(const held *h, int nh, bool on_this_thread) {
    for (int i = 0; i < nh; i++) {
        mpool *m = &P[h[i].pool];
        m->graph_holds--;
        bool goes_now = on_this_thread && m->state == SLOT_LIVE && !m->deferred && m->pending_clears == 0;
        pool_refs_changed(h[i].pool, false);
        bool room = nhanded_off < (int)(sizeof handed_off_uids / sizeof *handed_off_uids);
        if (goes_now && m->state == SLOT_FREE && room) handed_off_uids[nhanded_off++] = (int)m->uid;
    }
}

void graph_release_model(int gi, bool on_this_thread) {
    mgraph *g = &G[gi];
    if (--g->refs > 0) return;
    graph_pools_released(g->h, g->nh, on_this_thread);
    memset(g, 0, sizeof *g);
}

static int free_graph_slot(void) {
    for (int i = 0; i < NGRAPH; i++)
        if (!G[i].g) return i;
    return NGRAPH;
}

/* Stores a new graph; with no free slot it is released at once. */
void graph_store(const mgraph *m, cpool_graph *g) {
    int gi = free_graph_slot();
    G[gi] = *m;
    G[gi].g = g;
    if (cpool_graph_replays(g) != 0) fail("a new graph reports %llu replays", (unsigned long long)cpool_graph_replays(g));
    cpool_pool *bound = m->bound >= 0 ? P[m->bound].p : NULL;
    if (cpool_graph_pool(g) != bound) fail("cpool_graph_pool is not the capture's pool");
    if (gi == NGRAPH) {
        graph_release_model(gi, true);
        cpool_graph_release(g);
        push_dead(dead_graphs, &ndead_graphs, g);
        run_verifies();
    }
}

/* ---- model checks -------------------------------------------------------------- */

cpool_pool_stats stats_of(int pi) {
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    EXPECT_OK(cpool_pool_get_stats(P[pi].p, &st));
    return st;
}

/* A suspended pool holds no device memory: its stats say 0 for it, and
 * live blocks' bytes are on the host only after a KEEP_CONTENTS suspend. */
static void check_suspended_pool(const mpool *m, const cpool_pool_stats *st) {
    if (!cpool_pool_is_suspended(m->p)) fail("pool #%u: suspended, but cpool_pool_is_suspended says no", m->uid);
    if (st->reserved_bytes || st->graph_reserved_bytes || st->cached_bytes || st->segment_count)
        fail("pool #%u: suspended with reserved %llu, graph reserved %llu, cached %llu in %llu segments (all 0 expected)",
             m->uid, (unsigned long long)st->reserved_bytes, (unsigned long long)st->graph_reserved_bytes,
             (unsigned long long)st->cached_bytes, (unsigned long long)st->segment_count);
    /* Live blocks are kept whole (rounded up, small gaps between them too). */
    if (m->kept ? st->host_kept_bytes < m->live_bytes : st->host_kept_bytes != 0)
        fail("pool #%u: suspended (%s) with host_kept_bytes %llu, live allocations %llu", m->uid,
             m->kept ? "KEEP_CONTENTS" : "DISCARD", (unsigned long long)st->host_kept_bytes,
             (unsigned long long)m->live_bytes);
    if (st->host_reserved_bytes < st->host_kept_bytes)
        fail("pool #%u: host_reserved_bytes %llu below host_kept_bytes %llu", m->uid,
             (unsigned long long)st->host_reserved_bytes, (unsigned long long)st->host_kept_bytes);
}

void check_pool(int pi) {
    mpool *m = &P[pi];
    cpool__pool_check(m->p);
    cpool_pool_stats st = stats_of(pi);
    if (st.allocated_bytes != m->live_bytes)
        fail("pool #%u: allocated_bytes %llu, the model has %llu", m->uid, (unsigned long long)st.allocated_bytes,
             (unsigned long long)m->live_bytes);
    if (st.alloc_count != m->allocs || st.free_count != m->frees)
        fail("pool #%u: alloc_count %llu free_count %llu, the model has %llu and %llu", m->uid,
             (unsigned long long)st.alloc_count, (unsigned long long)st.free_count, (unsigned long long)m->allocs,
             (unsigned long long)m->frees);
    if (st.graph_count != (uint64_t)m->graph_holds)
        fail("pool #%u: graph_count %llu, %d graphs hold it", m->uid, (unsigned long long)st.graph_count, m->graph_holds);
    if (st.reserved_bytes > st.reserved_bytes_peak || st.allocated_bytes > st.allocated_bytes_peak)
        fail("pool #%u: a counter above its peak", m->uid);
    if (m->suspended) {
        check_suspended_pool(m, &st);
    } else {
        if (cpool_pool_is_suspended(m->p)) fail("pool #%u: cpool_pool_is_suspended, but no suspend succeeded", m->uid);
        if (st.host_kept_bytes) fail("pool #%u: host_kept_bytes %llu while not suspended", m->uid,
                                     (unsigned long long)st.host_kept_bytes);
    }
    if (m->max_reserved && st.reserved_bytes > m->max_reserved)
        fail("pool #%u: reserved_bytes %llu above max_reserved_bytes %llu", m->uid, (unsigned long long)st.reserved_bytes,
             (unsigned long long)m->max_reserved);
    if (st.graph_reserved_bytes > st.reserved_bytes) fail("pool #%u: graph_reserved_bytes above reserved_bytes", m->uid);
    if (st.cached_bytes > st.reserved_bytes) fail("pool #%u: cached_bytes above reserved_bytes", m->uid);
    /* Captures under way may hold blocks on the same shared page (graph
     * pages), so only without one do live blocks take their own memory. */
    if (!m->suspended && m->capture_holds == 0 && st.reserved_bytes - st.cached_bytes < st.allocated_bytes)
        fail("pool #%u: live blocks (%llu bytes) smaller than the live allocations (%llu)", m->uid,
             (unsigned long long)(st.reserved_bytes - st.cached_bytes), (unsigned long long)st.allocated_bytes);
    if (!m->suspended && m->capture_holds == 0 && st.graph_reserved_bytes < m->graph_live_rounded)
        fail("pool #%u: graph_reserved_bytes %llu below the live graph allocations (%llu)", m->uid,
             (unsigned long long)st.graph_reserved_bytes, (unsigned long long)m->graph_live_rounded);
    if ((st.segment_count == 0) != (st.reserved_bytes == 0))
        fail("pool #%u: %llu segments for %llu reserved bytes", m->uid, (unsigned long long)st.segment_count,
             (unsigned long long)st.reserved_bytes);
    if (cpool_pool_is_sealed(m->p) != m->sealed) fail("pool #%u: cpool_pool_is_sealed disagrees", m->uid);
    if (!m->records_unknown && !nest_risk(m) && cpool_pool_buffer_count(m->p) != m->records)
        fail("pool #%u: buffer count %zu, %zu recorded", m->uid, cpool_pool_buffer_count(m->p), m->records);
}

void check_all(void) {
    for (int pi = 0; pi < NPOOL; pi++)
        if (P[pi].state == SLOT_LIVE) check_pool(pi);
    for (int s = 0; s < NS; s++) {
        if (!S[s]) continue;
        cpool_capture_state cs = (cpool_capture_state)-1;
        EXPECT_OK(cpool_capture_status(S[s], &cs));
        const mcapture *c = fork_of[s] >= 0 ? &C[fork_of[s]] : &C[s]; /* a fork reports its origin's capture */
        cpool_capture_state want = !c->active      ? CPOOL_CAPTURE_NONE
                                   : c->invalidated ? CPOOL_CAPTURE_INVALIDATED
                                                    : CPOOL_CAPTURE_ACTIVE;
        if (cs != want) fail("stream %d: capture state %d, expected %d", s, (int)cs, (int)want);
    }
}

static bool overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn) { return a < b + bn && b < a + an; }

/* A new allocation or parameter block [ptr, ptr+size) of pool pi. `stream`:
 * the allocating stream, -1 for a graph or a parameter block (no pending
 * work allowed at all). */
void check_new_block(int pi, void *ptr, size_t size, int stream, bool outside_capture, const char *what) {
    mpool *m = &P[pi];
    uintptr_t a = (uintptr_t)ptr;
    if (!ptr) fail("%s: OK with a NULL pointer", what);
    if (a % 256) fail("%s: %p is not 256-byte aligned", what, ptr);
    for (int i = 0; i < NALLOC; i++)
        if (A[i].live && overlaps(a, size, (uintptr_t)A[i].ptr, A[i].size))
            fail("%s: [%p, +%zu) overlaps live allocation %d [%p, +%zu) of pool #%u", what, ptr, size, i, A[i].ptr,
                 A[i].size, P[A[i].pool].uid);
    for (int q = 0; q < NPOOL; q++) {
        if (P[q].state != SLOT_LIVE) continue;
        for (int k = 0; k < P[q].nparams; k++)
            if (overlaps(a, size, (uintptr_t)P[q].params[k].ptr, P[q].params[k].size))
                fail("%s: [%p, +%zu) overlaps a parameter block of pool #%u", what, ptr, size, P[q].uid);
    }
    for (int k = 0; k < m->nfreed;) {
        freed_range *f = &m->freed[k];
        if (!overlaps(a, size, f->addr, f->size)) {
            k++;
            continue;
        }
        /* Work on `stream` that waited for an event recorded on the freeing
         * stream after the free runs after that work: reuse follows events. */
        bool ordered = stream >= 0 && dep_mark[stream][f->stream] >= f->mark;
        if ((stream < 0 || f->stream != stream) && !ordered && atomic_load(&done[f->stream]) < f->mark)
            fail("%s on %s%d: [%p, +%zu) reuses memory freed on stream %d whose earlier work has not finished (%llu of "
                 "%llu tasks done)",
                 what, stream < 0 ? "graph/param " : "stream ", stream, ptr, size, f->stream,
                 (unsigned long long)atomic_load(&done[f->stream]), (unsigned long long)f->mark);
        m->freed[k] = m->freed[--m->nfreed]; /* superseded by this allocation */
    }
    if (outside_capture)
        for (int k = 0; k < m->ngr; k++)
            if (overlaps(a, size, m->graph_ranges[k].addr, m->graph_ranges[k].size))
                fail("%s outside capture: [%p, +%zu) overlaps graph-reserved memory [%p, +%zu) of pool #%u", what, ptr,
                     size, (void *)m->graph_ranges[k].addr, m->graph_ranges[k].size, m->uid);
}

void add_graph_range(mpool *m, void *ptr, size_t size) {
    if (m->ngr == NRANGE) {
        memmove(m->graph_ranges, m->graph_ranges + 1, (NRANGE - 1) * sizeof *m->graph_ranges);
        m->ngr--;
    }
    m->graph_ranges[m->ngr++] = (range){(uintptr_t)ptr, size};
}

void add_freed(mpool *m, void *ptr, size_t size, int s) {
    if (m->nfreed == NRANGE) {
        memmove(m->freed, m->freed + 1, (NRANGE - 1) * sizeof *m->freed);
        m->nfreed--;
    }
    m->freed[m->nfreed++] = (freed_range){(uintptr_t)ptr, size, s, enq[s]};
}

/* Whether ptr is the start of a live allocation or parameter block of pi. */
bool live_start(int pi, void *ptr) {
    for (int i = 0; i <= NALLOC; i++)
        if (A[i].live && A[i].pool == pi && A[i].ptr == ptr) return true;
    for (int k = 0; k < P[pi].nparams; k++)
        if (P[pi].params[k].ptr == ptr) return true;
    return false;
}

/* What a failed allocation may change: nothing, except that running out of
 * memory first gives cached, unused segments back (header of cpool_alloc);
 * for more than 2^47 bytes nothing at all. */
void check_failed_alloc(int pi, const cpool_pool_stats *before, cpool_status st, bool huge, size_t size,
                        const char *what) {
    cpool_pool_stats after = stats_of(pi);
    const cpool_pool_stats *b = before, *a = &after;
    if (st != CPOOL_ERR_OUT_OF_MEMORY || huge) {
        if (memcmp(b, a, sizeof *b))
            fail("pool #%u: a %s that failed with %s changed the statistics", P[pi].uid, what, cpool_status_string(st));
        return;
    }
    /* Out of memory in a bounded pool: once the idle segments were given
     * back, even the smallest segment for the request (its size rounded up
     * to 2 MiB) did not fit under the bound. */
    uint64_t need = (round512(size) + (2u << 20) - 1) / (2u << 20) * (2u << 20);
    if (P[pi].max_reserved && a->reserved_bytes + need <= P[pi].max_reserved)
        fail("pool #%u: a %s of %zu bytes ran out of memory with %llu of max_reserved_bytes %llu reserved: a %llu-byte "
             "segment fits",
             P[pi].uid, what, size, (unsigned long long)a->reserved_bytes, (unsigned long long)P[pi].max_reserved,
             (unsigned long long)need);
    /* Where segments grow in place, the pages given back may lie inside a
     * mapped run, which then counts as two. */
    bool runs_may_split = cpool_pool_grows_in_place(P[pi].p);
    if (a->allocated_bytes != b->allocated_bytes || a->allocated_bytes_peak != b->allocated_bytes_peak ||
        a->alloc_count != b->alloc_count || a->free_count != b->free_count ||
        a->graph_reserved_bytes != b->graph_reserved_bytes || a->reserved_bytes_peak != b->reserved_bytes_peak ||
        a->graph_count != b->graph_count || a->reserved_bytes > b->reserved_bytes ||
        (a->segment_count > b->segment_count && !runs_may_split) ||
        a->reserved_bytes - a->cached_bytes != b->reserved_bytes - b->cached_bytes)
        fail("pool #%u: a %s that ran out of memory changed more than the cached segments", P[pi].uid, what);
}

/* The status of an allocation: each condition that applies has its status
 * (which one wins when several apply is not specified); with none, OK, or
 * out of memory in a bounded pool. */
void expect_alloc_status(cpool_status st, bool zero, bool sealed, bool suspended, bool huge, bool bounded,
                         const char *what) {
    if (zero || sealed || suspended || huge) {
        if ((zero && st == CPOOL_ERR_INVALID_ARGUMENT) || (sealed && st == CPOOL_ERR_SEALED) ||
            (suspended && st == CPOOL_ERR_SUSPENDED) || (huge && st == CPOOL_ERR_OUT_OF_MEMORY)) {
            if (!cpool_last_error()[0]) fail("%s: failed with %s but cpool_last_error() is empty", what, cpool_status_string(st));
            return;
        }
        fail("%s: returned %s for a request that is%s%s%s%s", what, cpool_status_string(st), zero ? " of 0 bytes" : "",
             sealed ? " to a sealed pool" : "", suspended ? " to a suspended pool" : "", huge ? " beyond any device" : "");
    }
    if (bounded)
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_OUT_OF_MEMORY, what);
    else
        check_status(st, CPOOL_OK, what, true);
}
