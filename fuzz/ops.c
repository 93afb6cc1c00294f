/*
 * ops.c: the fuzz_api harness's operations, each decoded from the input's
 * bytes (declared in ops.h; the dispatch by op byte is driver.c's step).
 *
 * - Host callbacks the operations enqueue: markers, gates and timed gates
 *   (fn_marker, fn_gate, fn_timed_gate), tasks (fn_task: releases, clears,
 *   parameter checks, calls refused inside a callback, a stream's destroy),
 *   captured ticks; the drops of recorded objects (drop_cb and what each
 *   kind of drop does); the body of scoped captures (body_fn, body_step).
 * - Stream helpers that bring the model up to date: resolve, do_sync,
 *   do_wait_deferred.
 * - The operations (op_*) and what they share (do_alloc_want,
 *   do_free_valid, do_clear, do_trim, release_pool_ref, ...): pools,
 *   allocation, parameter blocks, capture and graphs, callbacks, the
 *   temporary stream and its destroy with pending work, dead handles, the
 *   cross clear, eager frees under capture, bounded pools under capture,
 *   miscellaneous calls.
 * Each operation checks the statuses of its calls; the model and the checks
 * after every step are model.c's.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../tests/json.h" /* reads snapshots back */

#include "capturepool.h"
#include "model.h"
#include "ops.h"

/* ---- host callbacks: markers and gates --------------------------------------- */

static _Thread_local int in_host; /* inside one of the harness's host callbacks */

static void fn_marker(void *arg) {
    in_host++;
    atomic_fetch_add(&done[(uintptr_t)arg], 1);
    in_host--;
}

static void fn_gate(void *arg) {
    in_host++;
    uintptr_t v = (uintptr_t)arg;
    int s = (int)(v & 7);
    uint64_t epoch = v >> 3;
    pthread_mutex_lock(&gate_mu);
    while (gate_opened[s] < epoch) pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
    atomic_fetch_add(&done[s], 1);
    in_host--;
}

/* A gate that also opens by itself, `ms` milliseconds after it began to
 * wait: a stream held back by it is not waited for forever by anyone. */
static void fn_timed_gate(void *arg) {
    in_host++;
    uintptr_t v = (uintptr_t)arg;
    int s = (int)(v & 7);
    long ms = (long)((v >> 3) & 31);
    uint64_t epoch = v >> 8;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_nsec += ms * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&gate_mu);
    while (gate_opened[s] < epoch)
        if (pthread_cond_timedwait(&gate_cv, &gate_mu, &deadline) == ETIMEDOUT) break;
    pthread_mutex_unlock(&gate_mu);
    atomic_fetch_add(&done[s], 1);
    in_host--;
}

/* ---- calls on dead handles: the reason they leave ---------------------------- */

/* Dead-handle calls must leave their reason in cpool_last_error(): the text
 * is set to another failure's first, and must have changed after. */
static void mark_error(char *buf, size_t n) {
    void *p = NULL;
    (void)cpool_alloc(NULL, 1, NULL, &p);
    snprintf(buf, n, "%s", cpool_last_error());
}
#define EXPECT_REASON(call)                                                                        \
    do {                                                                                           \
        char before_[512];                                                                         \
        mark_error(before_, sizeof before_);                                                       \
        call;                                                                                      \
        if (strcmp(cpool_last_error(), before_) == 0)                                              \
            fail("%s left no reason in cpool_last_error()", #call);                                \
    } while (0)
#define EXPECT_DEAD(call) EXPECT_REASON(check_status((call), CPOOL_ERR_INVALID_ARGUMENT, #call " (dead handle)", true))

/* ---- recorded objects: the drops ---------------------------------------------- */

static void never_drop(void *o) {
    (void)o;
    fail("the drop of a refused cpool_pool_record ran");
}

/* Every call on a dead pool handle: refused, nothing happens, and the reason
 * is left. `s` is a live stream. Also called from drops (any thread). */
static void probe_dead_pool(cpool_pool *h, cpool_stream *s) {
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

static void drop_cb(void *o);

/* A drop of kind DROP_RECORD: a new plain object, registered after the
 * whole batch being dropped, so it is dropped last, by the clear that
 * follows. */
static void record_from_drop(unsigned uid, cpool_pool *pool) {
    pthread_mutex_lock(&drop_mu);
    if (nobj < NOBJ) {
        obj *nb = &objs[nobj++];
        *nb = (obj){.used = true, .uid = uid, .serial = next_serial[uid]++, .droppable = true, .kind = DROP_PLAIN,
                    .ctx = CTX_ALIVE, .pool = pool};
        check_status(cpool_pool_record(pool, nb, drop_cb, NULL), CPOOL_OK, "cpool_pool_record in a drop", true);
    } else {
        check_status(cpool_pool_record(pool, NULL, NULL, NULL), CPOOL_OK, "cpool_pool_record in a drop", true);
    }
    pthread_mutex_unlock(&drop_mu);
}

/* What a drop does besides the checks: calls on its own pool, whose handle
 * is live in a clear and dead in the final teardown. */
static void drop_action(unsigned uid, int kind, int ctx, cpool_pool *pool) {
    cpool_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    cpool_status gs = cpool_pool_get_stats(pool, &st);
    expect_one_of(gs, CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_get_stats in a drop, on the drop's own pool");
    bool alive = gs == CPOOL_OK;
    if (ctx == CTX_ALIVE && !alive) fail("an object of pool #%u dropped by a clear, but the pool's handle is dead", uid);
    if (ctx == CTX_DEAD && alive)
        fail("an object of pool #%u dropped in the pool's final teardown, but the pool's handle still works", uid);
    switch (kind) {
    case DROP_CLEAR:
        if (alive) atomic_fetch_add(&nested_clears[uid], 1);
        cpool_pool_clear_buffers(pool);
        break;
    case DROP_RELEASE:
        if (!alive) fail("an object holding a reference to pool #%u was dropped in the pool's final teardown", uid);
        cpool_pool_release(pool);
        atomic_fetch_sub(&drop_refs[uid], 1);
        break;
    case DROP_WAIT:
        cpool_wait_deferred();
        break;
    case DROP_PROBE:
        if (alive) {
            (void)cpool_pool_buffer_count(pool);
            (void)cpool_pool_is_sealed(pool);
        } else {
            probe_dead_pool(pool, S[0]);
        }
        break;
    case DROP_RECORD:
        if (!alive) {
            check_status(cpool_pool_record(pool, &st, never_drop, NULL), CPOOL_ERR_INVALID_ARGUMENT,
                         "cpool_pool_record in a drop of its pool's final teardown", true);
            break;
        }
        record_from_drop(uid, pool);
        atomic_fetch_add(&nested_clears[uid], 1);
        cpool_pool_clear_buffers(pool);
        break;
    default:
        break;
    }
}

/* DROP_CROSS: the two drops meet (or give up waiting after 200 ms) before
 * each clears the other's pool, so that both clears are dropping at once. */
static atomic_int cross_met;

static void cross_drop(cpool_pool *other, unsigned other_uid) {
    atomic_fetch_add(&cross_met, 1);
    for (int i = 0; i < 2000 && atomic_load(&cross_met) < 2; i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add(&nested_clears[other_uid], 1);
    cpool_pool_clear_buffers(other);
}

static void drop_cb(void *o) {
    obj *ob = o;
    if (in_host) fail("a recorded object was dropped inside a stream callback");
    bool on_main = pthread_equal(pthread_self(), main_thread);
    pthread_mutex_lock(&drop_mu);
    if (!ob->droppable)
        fail("object %d (pool #%u, serial %llu) dropped before a clear or the last release", (int)(ob - objs), ob->uid,
             (unsigned long long)ob->serial);
    if (ob->drops++) fail("object %d (pool #%u) dropped twice", (int)(ob - objs), ob->uid);
    if (ob->serial <= last_dropped[ob->uid])
        fail("pool #%u dropped serial %llu after serial %llu: not in registration order", ob->uid,
             (unsigned long long)ob->serial, (unsigned long long)last_dropped[ob->uid]);
    last_dropped[ob->uid] = ob->serial;
    unsigned uid = ob->uid;
    int kind = ob->kind, ctx = ob->ctx;
    cpool_pool *pool = ob->pool, *other = ob->other;
    unsigned other_uid = ob->other_uid;
    pthread_mutex_unlock(&drop_mu);
    if (on_main)
        for (int s = 0; s < NS; s++)
            if (tracked(s) && atomic_load(&done[s]) < snap[s])
                fail("object of pool #%u dropped while stream %d%s still runs work enqueued before the call (%llu of "
                     "%llu done)",
                     uid, s, S[s] ? "" : " (destroyed, its work pending)", (unsigned long long)atomic_load(&done[s]),
                     (unsigned long long)snap[s]);
    if (kind == DROP_CROSS)
        cross_drop(other, other_uid);
    else
        drop_action(uid, kind, ctx, pool);
}

/* ---- stream helpers ------------------------------------------------------------ */

static void enqueue_marker(int s) {
    EXPECT_OK(cpool_launch_host(S[s], fn_marker, (void *)(uintptr_t)s));
    enq[s]++;
}

enum { CB_DESTROY_STREAM = CB_REFUSE + 1 };

typedef struct cbtask {
    int kind, stream;
    cpool_pool *pool;
    cpool_graph *graph;
    cpool_stream *own, *other; /* CB_REFUSE: its own stream and another; CB_DESTROY_STREAM: the one to destroy */
    const unsigned char *ptr;
    size_t n;
    unsigned char val[64];
} cbtask;

static void fn_task(void *arg) {
    in_host++;
    cbtask *t = arg;
    int s = t->stream;
    switch (t->kind) {
    case CB_RELEASE_POOL:
        cpool_pool_release(t->pool);
        break;
    case CB_CLEAR_RELEASE_POOL:
        cpool_pool_clear_buffers(t->pool);
        cpool_pool_release(t->pool);
        break;
    case CB_RELEASE_GRAPH:
        cpool_graph_release(t->graph);
        break;
    case CB_PARAM_CHECK:
        if (memcmp(t->ptr, t->val, t->n) != 0)
            fail("a parameter block read in stream order after cpool_param_set does not hold the value set");
        break;
    case CB_REFUSE: /* calls that would wait for stream work: refused at once, never a hang */
        check_status(cpool_stream_synchronize(t->own), CPOOL_ERR_INVALID_ARGUMENT,
                     "cpool_stream_synchronize of its own stream inside a stream callback", true);
        check_status(cpool_stream_synchronize(t->other), CPOOL_ERR_INVALID_ARGUMENT,
                     "cpool_stream_synchronize of another stream inside a stream callback", true);
        check_status(cpool_pool_trim(t->pool), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_trim inside a stream callback",
                     true);
        check_status(cpool_pool_suspend(t->pool, CPOOL_SUSPEND_DISCARD), CPOOL_ERR_INVALID_ARGUMENT,
                     "cpool_pool_suspend inside a stream callback", true);
        check_status(cpool_pool_resume(t->pool), CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_resume inside a stream callback",
                     true);
        cpool_wait_deferred(); /* returns at once */
        break;
    case CB_DESTROY_STREAM: /* handed to the library's thread */
        cpool_stream_destroy(t->own);
        break;
    }
    free(t);
    atomic_fetch_add(&done[s], 1);
    in_host--;
}

static void enqueue_task(int s, cbtask *t) {
    t->stream = s;
    EXPECT_OK(cpool_launch_host(S[s], fn_task, t));
    enq[s]++;
}

/* Applies the callbacks on stream s, which have run now. */
static void resolve(int s) {
    for (int i = 0; i < npend;) {
        if (pend[i].stream != s) {
            i++;
            continue;
        }
        mpool *m = &P[pend[i].pool];
        if (pend[i].kind == CB_CLEAR_RELEASE_POOL) {
            m->pending_clears--;
            m->gen++;
            if (m->pending_clears == 0 && m->state == SLOT_LIVE) {
                size_t actual = cpool_pool_buffer_count(m->p);
                if (actual > m->records)
                    fail("pool #%u: %zu buffers after a clear, only %zu were recorded", m->uid, actual, m->records);
                m->records = actual;
                m->records_unknown = false;
            }
        }
        m->cb_refs--;
        if (m->state == SLOT_ZOMBIE && m->cb_refs == 0) m->state = SLOT_FREE;
        pend[i] = pend[--npend];
    }
}

void do_sync(int s) {
    if (C[s].active) {
        EXPECT(cpool_stream_synchronize(S[s]), CPOOL_ERR_CAPTURE_INVALIDATED);
        C[s].invalidated = true;
        return;
    }
    before_blocking();
    EXPECT_OK(cpool_stream_synchronize(S[s]));
    if (atomic_load(&done[s]) != enq[s])
        fail("stream %d synchronized with %llu of %llu tasks done", s, (unsigned long long)atomic_load(&done[s]),
             (unsigned long long)enq[s]);
    resolve(s);
    events_synced(s);
}

void do_wait_deferred(void) {
    before_blocking();
    cpool_wait_deferred();
    verify_handed_off();
    for (int pi = 0; pi < NPOOL; pi++) {
        mpool *m = &P[pi];
        if (m->state != SLOT_LIVE || m->pending_clears != 0 || !m->deferred) continue;
        bool risk = nest_risk(m);
        m->deferred = false;
        absorb_nested(pi);
        if (risk) { /* nested clears on the library's thread may have taken records */
            size_t actual = cpool_pool_buffer_count(m->p);
            if (actual > m->records && !m->records_unknown)
                fail("pool #%u: %zu buffers after deferred drops, only %zu were recorded", m->uid, actual, m->records);
            m->records = actual;
            m->records_unknown = false;
        }
    }
}

/* ---- operations: pools ----------------------------------------------------------- */

/* The model of a pool just created into slot pi, with the harness's one
 * reference. */
static mpool *adopt_pool(int pi, cpool_pool *p, uint64_t maxr) {
    mpool *m = &P[pi];
    memset(m, 0, sizeof *m);
    m->state = SLOT_LIVE;
    m->p = p;
    m->uid = next_uid++;
    m->harness = 1;
    m->max_reserved = maxr;
    next_serial[m->uid] = 1;
    return m;
}

static int free_pool_slot(void) {
    for (int i = 0; i < NPOOL; i++)
        if (P[i].state == SLOT_FREE) return next_uid < NUID ? i : -1;
    return -1;
}

void op_pool_create(rd *r) {
    uint8_t v = u8(r), a = u8(r), b = u8(r);
    int pi = -1;
    for (int i = 0; i < NPOOL; i++)
        if (P[i].state == SLOT_FREE) {
            pi = i;
            break;
        }
    if (pi < 0 || next_uid >= NUID) return;
    static const uint64_t reserves[16] = {0,         1,         512,       (2u << 20) - 1, 2u << 20,  3u << 20,
                                          5u << 20,  (2u << 20) + 1, 4096, 4u << 20,       1u << 20,  0,
                                          6u << 20,  0,         0,         (uint64_t)1 << 48 /* beyond any device */};
    static const uint64_t maxes[8] = {0, 1, 2u << 20, (2u << 20) + 1, 3u << 20, 4u << 20, 8u << 20, 24u << 20};
    struct {
        cpool_pool_options o;
        unsigned char newer_fields[16];
    } big;
    memset(&big, 0, sizeof big);
    cpool_pool_options *opts = &big.o;
    uint64_t reserve = 0, maxr = 0;
    bool invalid = false;
    switch (v % 6) {
    case 0:
        opts = NULL;
        break;
    case 1: /* too small for even struct_size */
        opts->struct_size = a % sizeof(size_t);
        opts->reserve_bytes = reserves[b % 16];
        invalid = true;
        break;
    case 2: /* an old caller's struct: the fields beyond struct_size are not read */
        opts->struct_size = sizeof(size_t);
        opts->reserve_bytes = reserves[a % 16];
        opts->max_reserved_bytes = maxes[b % 8];
        break;
    case 3:
        opts->struct_size = sizeof *opts;
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxr = maxes[b % 8];
        break;
    case 4: /* a newer caller's larger struct, zero beyond what the library knows */
        opts->struct_size = sizeof big;
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxr = maxes[b % 8];
        break;
    case 5:
        opts->struct_size = offsetof(cpool_pool_options, max_reserved_bytes);
        opts->reserve_bytes = reserve = reserves[a % 16];
        opts->max_reserved_bytes = maxes[b % 8];
        break;
    }
    if (maxr && reserve > maxr) invalid = true;
    /* Reserved memory is rounded up to 2 MiB segments: where that rounding
     * goes past the bound, the pool may refuse, or reserve less; never more
     * than the bound. */
    uint64_t rounded = reserve ? (reserve + (2u << 20) - 1) / (2u << 20) * (2u << 20) : 0;
    bool past_bound = !invalid && maxr && rounded > maxr;
    bool impossible = !invalid && reserve > ((uint64_t)1 << 47);
    TRACE("pool_create slot %d variant %d reserve %llu max %llu\n", pi, v % 6, (unsigned long long)reserve,
          (unsigned long long)maxr);
    cpool_pool *const unset = (cpool_pool *)&big, *p = unset;
    cpool_status st = cpool_pool_create(dev, opts, &p);
    if (st != CPOOL_OK && p != unset) fail("a failed cpool_pool_create wrote its output");
    if (invalid && reserve > ((uint64_t)1 << 47)) {
        /* Also beyond any device: which of the two statuses wins is not
         * specified. */
        expect_one_of(st, CPOOL_ERR_INVALID_ARGUMENT, CPOOL_ERR_OUT_OF_MEMORY,
                      "cpool_pool_create (reserve above the bound and beyond any device)");
        return;
    }
    if (invalid) {
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_create (bad options)", true);
        return;
    }
    if (impossible) {
        check_status(st, CPOOL_ERR_OUT_OF_MEMORY, "cpool_pool_create (reserve beyond any device)", true);
        return;
    }
    if (past_bound) {
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_INVALID_ARGUMENT, "cpool_pool_create (reserve rounds past the bound)");
        if (st != CPOOL_OK) return;
    } else {
        check_status(st, CPOOL_OK, "cpool_pool_create", true);
    }
    mpool *m = adopt_pool(pi, p, maxr);
    cpool_pool_stats s = stats_of(pi);
    if (s.allocated_bytes || s.alloc_count || s.free_count)
        fail("new pool #%u: allocations before any cpool_alloc", m->uid);
    if (past_bound ? s.reserved_bytes < reserve || s.reserved_bytes > maxr
                   : s.reserved_bytes != rounded || s.segment_count != (reserve ? 1u : 0u))
        fail("new pool #%u with reserve_bytes %llu, max_reserved_bytes %llu: reserved %llu in %llu segments "
             "(expected %llu in 2 MiB segments%s)",
             m->uid, (unsigned long long)reserve, (unsigned long long)maxr, (unsigned long long)s.reserved_bytes,
             (unsigned long long)s.segment_count, (unsigned long long)rounded,
             past_bound ? ", or at least reserve_bytes and at most max_reserved_bytes" : "");
}

void op_pool_retain(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("pool_retain #%u\n", P[pi].uid);
    if (cpool_pool_retain(P[pi].p) != P[pi].p) fail("cpool_pool_retain returned another pointer");
    P[pi].harness++;
}

static void do_clear(int pi);

/* Drops one of the harness's references to pool slot pi, model first. The
 * objects of kind DROP_RELEASE hold references that only their drops give
 * back: before the harness's last one goes, a clear drops them (else the
 * pool would keep itself alive). */
void release_pool_ref(int pi) {
    cpool_pool *p = P[pi].p;
    mpool *m = &P[pi];
    if (m->harness == 1 && atomic_load(&drop_refs[m->uid]) > 0 && (m->uid & 1) && !m->deferred && !m->pending_clears) {
        /* The other way round: the harness's reference goes first, the
         * objects' keep the pool alive, and a clear through the handle drops
         * them: the last reference goes in a drop, the teardown follows at
         * the end of that clear. */
        TRACE("release #%u while objects hold references, then clear it\n", m->uid);
        before_blocking();
        m->harness--;
        cpool_pool_release(p);
        mark_droppable(m->uid, CTX_ALIVE);
        m->gen++;
        m->records = 0;
        cpool_pool_clear_buffers(p);
        if (atomic_load(&drop_refs[m->uid]) != 0)
            fail("pool #%u: after cpool_pool_clear_buffers returned, %d objects that hold a reference were not dropped",
                 m->uid, atomic_load(&drop_refs[m->uid]));
        verify_dropped(m->uid, "after cpool_pool_clear_buffers");
        absorb_nested(pi);
        pool_refs_changed(pi, true);
        run_verifies();
        return;
    }
    if (P[pi].harness == 1 && atomic_load(&drop_refs[P[pi].uid]) > 0) {
        TRACE("clear #%u first: objects hold references to it\n", P[pi].uid);
        do_clear(pi);
        if (atomic_load(&drop_refs[P[pi].uid]) != 0)
            fail("pool #%u: after cpool_pool_clear_buffers returned, %d objects that hold a reference were not dropped",
                 P[pi].uid, atomic_load(&drop_refs[P[pi].uid]));
    }
    before_blocking();
    P[pi].harness--;
    pool_refs_changed(pi, true);
    cpool_pool_release(p);
    run_verifies();
}

void op_pool_release(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("pool_release #%u (harness refs %d)\n", P[pi].uid, P[pi].harness);
    release_pool_ref(pi);
}

void op_record(rd *r) {
    uint8_t b = u8(r), v = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    mpool *m = &P[pi];
    static const int kinds[8] = {DROP_PLAIN, DROP_PLAIN, DROP_PLAIN, DROP_CLEAR,
                                 DROP_RELEASE, DROP_WAIT, DROP_PROBE, DROP_RECORD};
    int kind = kinds[(v >> 2) % 8];
    obj *ob = NULL;
    /* drop_mu across the record: drops may record too, and serials must
     * follow the order of registration. */
    pthread_mutex_lock(&drop_mu);
    if ((v & 1) == 0 && nobj < NOBJ) {
        ob = &objs[nobj++];
        ob->used = true;
        ob->uid = m->uid;
        ob->serial = next_serial[m->uid]++;
        /* a callback's clear, or a nested clear on another thread, may still take it */
        ob->droppable = m->pending_clears > 0 || nest_risk(m);
        ob->kind = kind;
        ob->ctx = CTX_UNKNOWN;
        ob->pool = m->p;
        if (kind == DROP_RELEASE) {
            if (cpool_pool_retain(m->p) != m->p) fail("cpool_pool_retain returned another pointer");
            atomic_fetch_add(&drop_refs[m->uid], 1); /* the object's, released by its drop */
        }
        if (kind == DROP_CLEAR || kind == DROP_RECORD) m->nesters++;
    }
    size_t idx = (size_t)-7;
    TRACE("record #%u obj %d drop kind %d\n", m->uid, ob ? (int)(ob - objs) : -1, ob ? kind : -1);
    cpool_status st = cpool_pool_record(m->p, ob ? (void *)ob : (void *)&P, ob ? drop_cb : NULL, (v & 2) ? NULL : &idx);
    pthread_mutex_unlock(&drop_mu);
    check_status(st, CPOOL_OK, "cpool_pool_record", true);
    if (!(v & 2) && !m->records_unknown && !nest_risk(m) && idx != m->records)
        fail("pool #%u: record index %zu, expected %zu", m->uid, idx, m->records);
    m->records++;
}

/* A clear on this thread: it returns once every object recorded before it
 * is dropped (by it, or by a clear already dropping on another thread). */
static void do_clear(int pi) {
    mpool *m = &P[pi];
    before_blocking();
    mark_droppable(m->uid, CTX_ALIVE);
    bool verify = !m->deferred && m->pending_clears == 0;
    m->gen++;
    m->records = 0;
    m->records_unknown = m->pending_clears > 0;
    cpool_pool_clear_buffers(m->p);
    if (verify) {
        verify_dropped(m->uid, "after cpool_pool_clear_buffers");
        absorb_nested(pi); /* the drops ran here, their nested clears too */
    }
}

void op_clear(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("clear #%u\n", P[pi].uid);
    do_clear(pi);
}

void op_seal(rd *r, bool seal) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("%s #%u\n", seal ? "seal" : "unseal", P[pi].uid);
    if (seal)
        cpool_pool_seal(P[pi].p);
    else
        cpool_pool_unseal(P[pi].p);
    P[pi].sealed = seal;
}

static void do_trim(int pi, const char *what) {
    mpool *m = &P[pi];
    before_blocking();
    check_status(cpool_pool_trim(m->p), CPOOL_OK, what, true);
    check_quiesced(what);
    bool no_holders = m->graph_holds + m->capture_holds == 0;
    if (no_holders) m->ngr = 0; /* graph-reserved memory is general again */
    cpool_pool_stats st = stats_of(pi);
    if (no_holders && m->live_count == 0 && (st.reserved_bytes || st.segment_count))
        fail("pool #%u: trim with nothing live and no graph or capture left %llu bytes in %llu segments", m->uid,
             (unsigned long long)st.reserved_bytes, (unsigned long long)st.segment_count);
    /* Graph memory is whole pages: what live graph blocks hold, at least,
     * and nothing once none is live. */
    if (no_holders && !m->suspended &&
        (st.graph_reserved_bytes < m->graph_live_rounded || (m->graph_live_rounded == 0 && st.graph_reserved_bytes != 0)))
        fail("pool #%u: trim with no graph or capture left %llu graph-reserved bytes, live graph allocations hold %llu",
             m->uid, (unsigned long long)st.graph_reserved_bytes, (unsigned long long)m->graph_live_rounded);
}

void op_trim(rd *r) {
    int pi = pick_pool(u8(r));
    if (pi < 0) return;
    TRACE("trim #%u\n", P[pi].uid);
    do_trim(pi, "cpool_pool_trim");
}

static uint64_t json_u64(const json *obj, const char *key) {
    const json *v = json_get(obj, key);
    return v && v->kind == JSON_NUMBER && v->is_integer ? v->integer : UINT64_MAX;
}

/* What a segment's or a range's blocks hold: all of them, the live ones
 * (sizes, and the sizes asked for), the graph ones, the free ones. */
typedef struct snapshot_tally {
    uint64_t size, live_size, requested, graph, free;
} snapshot_tally;

static void tally_blocks(const json *run, snapshot_tally *t) {
    const json *blocks = json_get(run, "blocks");
    uint64_t tiled = 0;
    for (size_t k = 0; blocks && k < blocks->count; k++) {
        const json *blk = blocks->items[k], *state = json_get(blk, "state");
        uint64_t size = json_u64(blk, "size");
        if (!state || state->kind != JSON_STRING) fail("a snapshot block has no state");
        bool is_live = !strcmp(state->string, "live") || !strcmp(state->string, "graph_live");
        if (is_live) {
            t->requested += json_u64(blk, "requested");
            t->live_size += size;
        } else {
            t->free += size;
        }
        if (!strncmp(state->string, "graph_", 6)) t->graph += size;
        tiled += size;
    }
    if (tiled != json_u64(run, "size")) fail("a snapshot segment's or range's blocks do not tile it");
    t->size += tiled;
}

/* What a suspended pool's resume maps back, as its snapshot says (the
 * stats themselves, when it is not suspended). */
typedef struct resident_memory {
    uint64_t reserved, graph, segments;
} resident_memory;

/* A snapshot of pool pi, read back: one JSON object whose sums are its own
 * stats (callbacks on other threads may change the pool meanwhile, so not
 * the stats of another moment), or while suspended the values of its
 * "suspended" object; and every live graph's accounting. `resident` (may
 * be NULL) gets what the resume maps back. */
static void check_snapshot(int pi, resident_memory *resident) {
    char path[128], error[160] = "";
    snprintf(path, sizeof path, "/tmp/capturepool-fuzz-%ld.json", (long)getpid());
    EXPECT_OK(cpool_pool_write_snapshot(P[pi].p, path));
    char *text = json_read_file(path);
    remove(path);
    if (!text) fail("cannot read a snapshot back");
    json *root = json_parse(text, error, sizeof error);
    free(text);
    if (!root) fail("a snapshot is not JSON: %s", error);
    const json *st = json_get(root, "stats"), *segs = json_get(root, "segments");
    const json *arenas = json_get(root, "arenas"), *physical = json_get(root, "physical");
    if (!st || !segs || segs->kind != JSON_ARRAY || !arenas || arenas->kind != JSON_ARRAY || !physical)
        fail("a snapshot lacks stats, segments, arenas or physical");
    /* Sums in physical bytes (docs/SNAPSHOT.md): segments are memory of
     * their own, eager or the packed region's; arenas add the distinct
     * pages behind their ranges ("physical"). */
    snapshot_tally eager = {0}, packed = {0}, ranges = {0};
    for (size_t i = 0; i < segs->count; i++) {
        const json *kind = json_get(segs->items[i], "kind");
        bool is_packed = kind && kind->kind == JSON_STRING && !strcmp(kind->string, "packed");
        tally_blocks(segs->items[i], is_packed ? &packed : &eager);
    }
    for (size_t i = 0; i < arenas->count; i++) {
        const json *rs = json_get(arenas->items[i], "ranges");
        for (size_t k = 0; rs && k < rs->count; k++) tally_blocks(rs->items[k], &ranges);
    }
    uint64_t pages = json_u64(physical, "bytes"), graph_memory = packed.size + pages;
    uint64_t graph_live = packed.live_size + ranges.live_size;
    uint64_t reserved = eager.size + packed.size + pages;
    uint64_t live = eager.requested + packed.requested + ranges.requested;
    uint64_t graph = eager.graph + graph_memory;
    uint64_t cached = eager.free + (graph_memory > graph_live ? graph_memory - graph_live : 0);
    /* Suspended, the stats say the pool holds no device memory, and the
     * segments and arenas are what the resume maps back: the sums hold
     * against "suspended" (docs/SNAPSHOT.md). */
    const json *suspended = json_get(root, "suspended");
    if (!suspended || (suspended->kind != JSON_OBJECT && (suspended->kind != JSON_BOOL || suspended->boolean)))
        fail("a snapshot's \"suspended\" is neither false nor an object");
    bool is_suspended = suspended->kind == JSON_OBJECT;
    if (is_suspended != P[pi].suspended)
        fail("pool #%u: a snapshot says %s, the model says %s", P[pi].uid, is_suspended ? "suspended" : "not suspended",
             P[pi].suspended ? "suspended" : "not");
    const json *mapped = is_suspended ? suspended : st;
    if (is_suspended && (json_u64(st, "reserved_bytes") || json_u64(st, "graph_reserved_bytes") ||
                         json_u64(st, "cached_bytes") || json_u64(st, "segment_count")))
        fail("pool #%u: a suspended pool's snapshot has stats of device memory", P[pi].uid);
    if (reserved != json_u64(mapped, "reserved_bytes") || live != json_u64(st, "allocated_bytes") ||
        graph != json_u64(mapped, "graph_reserved_bytes") ||
        (!is_suspended && cached != json_u64(st, "cached_bytes")))
        fail("pool #%u: a snapshot's sums (reserved %llu, allocated %llu, graph %llu, cached %llu) are not its %s",
             P[pi].uid, (unsigned long long)reserved, (unsigned long long)live, (unsigned long long)graph,
             (unsigned long long)cached, is_suspended ? "\"suspended\" values" : "stats");
    if (resident)
        *resident = (resident_memory){json_u64(mapped, "reserved_bytes"), json_u64(mapped, "graph_reserved_bytes"),
                                      json_u64(mapped, "segment_count")};
    json_free(root);
    for (int gi = 0; gi < NGRAPH; gi++) {
        if (!G[gi].g) continue;
        cpool_graph_stats gs = {.struct_size = sizeof gs};
        EXPECT_OK(cpool_graph_get_stats(G[gi].g, &gs));
        if (gs.shared_write_bytes > gs.write_bytes) fail("a graph shares more than it writes");
    }
}

void op_stats(rd *r) {
    uint8_t b = u8(r), v = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    TRACE("stats #%u variant %d\n", P[pi].uid, v % 4);
    if (v & 0x80) {
        TRACE("snapshot #%u\n", P[pi].uid);
        check_snapshot(pi, NULL);
    }
    cpool_pool_stats full = stats_of(pi);
    unsigned char buf[sizeof(cpool_pool_stats) + 32];
    memset(buf, 0xA5, sizeof buf);
    size_t size;
    cpool_status want = CPOOL_OK;
    switch (v % 4) {
    case 0:
        size = offsetof(cpool_pool_stats, cached_bytes); /* an older caller */
        break;
    case 1:
        size = offsetof(cpool_pool_stats, segment_count); /* too small */
        want = CPOOL_ERR_INVALID_ARGUMENT;
        break;
    case 2:
        size = sizeof(cpool_pool_stats) + 16; /* a newer caller */
        break;
    default:
        EXPECT(cpool_pool_get_stats(P[pi].p, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    memcpy(buf, &size, sizeof size);
    check_status(cpool_pool_get_stats(P[pi].p, (cpool_pool_stats *)(void *)buf), want, "cpool_pool_get_stats", true);
    size_t filled = want == CPOOL_OK ? (size < sizeof full ? size : sizeof full) : sizeof(size_t);
    if (want == CPOOL_OK && memcmp(buf + sizeof(size_t), (unsigned char *)&full + sizeof(size_t), filled - sizeof(size_t)))
        fail("cpool_pool_get_stats with struct_size %zu disagrees with the full statistics", size);
    for (size_t i = filled; i < sizeof buf; i++)
        if (buf[i] != 0xA5) fail("cpool_pool_get_stats with struct_size %zu wrote byte %zu", size, i);
}

/* ---- operations: allocation ------------------------------------------------------- */

/* Sizes: mostly small, which is fast; large ones (a segment of their own,
 * or a shared 20 MiB one) and impossible ones rarely. */
static size_t decode_size(rd *r) {
    static const size_t small[24] = {0,   1,   2,    7,    64,   255,  256,  257,   511,    512,    513, 1000,
                                     1024, 2047, 4095, 4096, 4097, 8192, 8193, 16384, 65536, 100000, 1, 512};
    static const size_t large[12] = {MIB - 1, MIB, MIB + 1, 2 * MIB, 3 * MIB, 5 * MIB, 10 * MIB - 1, 10 * MIB, 10 * MIB + 1,
                                     21 * MIB, 2 * MIB + 512, 20 * MIB};
    /* Beyond any device: refused before any memory is asked for. (Sizes the
     * host cannot give are not tried: AddressSanitizer would abort on them.) */
    static const size_t impossible[4] = {((size_t)1 << 47) + 1, (size_t)1 << 52, (size_t)1 << 62, SIZE_MAX};
    uint8_t c = u8(r) % 64;
    if (c < 24) return small[c];
    if (c < 48) return 1 + (((size_t)(c - 24) << 8) | u8(r)); /* up to 6 KiB */
    if (c < 60) return 1 + (((size_t)u8(r) << 8) | u8(r));    /* up to 64 KiB */
    if (c == 60) return large[u8(r) % 12];
    if (c == 61) return 1 + (((size_t)u8(r) << 8) | u8(r)) * 16; /* up to 1 MiB */
    if (c == 62) return impossible[u8(r) % 4];
    return 0;
}

static int free_alloc_slot(void) {
    for (int i = 0; i < NALLOC; i++)
        if (!A[i].live) return i;
    return NALLOC;
}

static void do_free_on(int ai, int s, int on);

/* An allocation of `size` from pool pi on stream `on`, in the model stream
 * s's capture or eager (on == s, or `on` forked into s's capture); `want`
 * is the status the model knows it must have, or -1. Returns its slot, or
 * -1 (failed, or freed at once for want of a slot). */
static int do_alloc_on(int pi, size_t size, int s, int on, int want) {
    mpool *m = &P[pi];
    bool cap = C[s].active;
    bool huge = size > HUGE_LIMIT;
    bool bounded = m->max_reserved != 0;
    TRACE("alloc #%u %zu bytes on stream %d%s%s\n", m->uid, size, s, cap ? " (capture)" : "",
          want < 0 ? "" : want == CPOOL_OK ? ", must succeed" : ", must fail");
    if (!cap && (bounded || huge)) before_blocking(); /* out of memory waits for stream work */
    cpool_pool_stats before = stats_of(pi);
    void *ptr = NULL;
    char kept[512];
    snprintf(kept, sizeof kept, "%s", cpool_last_error());
    cpool_status st = cpool_alloc(m->p, size, S[on], &ptr);
    if (st == CPOOL_OK) check_error_kept(kept, "cpool_alloc");
    if (want >= 0)
        check_status(st, (cpool_status)want, "cpool_alloc (the model knows its status)", true);
    else
        expect_alloc_status(st, size == 0, m->sealed, m->suspended, huge, bounded, "cpool_alloc");
    if (st != CPOOL_OK) {
        check_failed_alloc(pi, &before, st, huge, size, "cpool_alloc");
        return -1;
    }
    check_new_block(pi, ptr, size, cap ? -1 : s, !cap, "cpool_alloc");
    if (cap) branch_check_alloc(s, on, pi, ptr, size);
    int ai = free_alloc_slot();
    A[ai] = (malloc_t){true, pi, ptr, size, on, cap, cap ? C[s].id : 0};
    m->live_bytes += size;
    m->live_count++;
    m->allocs++;
    if (cap) {
        capture_hold(s, pi);
        add_graph_range(m, ptr, size);
        m->graph_live_rounded += round512(size);
    }
    if (ai == NALLOC) {
        do_free_on(ai, s, on);
        return -1;
    }
    return ai;
}

static int do_alloc_want(int pi, size_t size, int s, int want) { return do_alloc_on(pi, size, s, s, want); }

static void do_alloc(int pi, size_t size, int s) { (void)do_alloc_want(pi, size, s, -1); }

/* A free on stream `on`, in the model stream s's capture or eager (as
 * do_alloc_on). */
static void do_free_on(int ai, int s, int on) {
    malloc_t *a = &A[ai];
    mpool *m = &P[a->pool];
    bool cap = C[s].active;
    TRACE("free #%u %p (%zu bytes) on stream %d%s\n", m->uid, a->ptr, a->size, on, cap ? " (capture)" : "");
    EXPECT_OK(cpool_free(m->p, a->ptr, S[on]));
    m->live_bytes -= a->size;
    m->live_count--;
    m->frees++;
    if (a->graph) m->graph_live_rounded -= round512(a->size);
    if (cap) {
        capture_hold(s, a->pool);
        add_graph_range(m, a->ptr, a->size); /* freed under capture: the graph's now */
        branch_free_noted(s, on, a->pool, a->ptr, a->size);
        /* A block from outside capture may still be used by the freeing
         * stream's work from before the capture or its fork (enq counts
         * only that): no capture, on any stream, may have it before that
         * work ran. */
        if (!a->graph) add_freed(m, a->ptr, a->size, on);
    } else if (!a->graph) {
        add_freed(m, a->ptr, a->size, on);
    }
    ring[ring_next++ % NFREED] = (freed_ptr){m->uid, a->ptr};
    a->live = false;
}

static void do_free_valid(int ai, int s) { do_free_on(ai, s, s); }

/* A free in stream s's capture of a block of a suspended pool would make
 * the capture use the pool: the model does not follow that. */
static bool capture_frees_suspended(int ai, int s) { return C[s].active && P[A[ai].pool].suspended; }

/* Whether graph g holds a pool that is suspended now. */
static bool holds_suspended(const mgraph *g) {
    for (int i = 0; i < g->nh; i++)
        if (P[g->h[i].pool].state == SLOT_LIVE && P[g->h[i].pool].suspended) return true;
    return g->bound >= 0 && P[g->bound].state == SLOT_LIVE && P[g->bound].suspended;
}

void do_free_invalid(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    int local;
    void *ptr = NULL;
    cpool_stream *stream = S[s];
    const char *what = NULL;
    switch (v % 7) {
    case 6: /* a parameter block: the pool's own, not from cpool_alloc */
        if (!P[pi].nparams) return;
        ptr = P[pi].params[b % P[pi].nparams].ptr;
        what = "cpool_free (a parameter block)";
        break;
    case 0: { /* freed already (unless handed out again since) */
        freed_ptr f = ring[b % NFREED];
        if (!f.ptr) return;
        pi = -1;
        for (int q = 0; q < NPOOL; q++)
            if (usable(q) && P[q].uid == f.uid) pi = q;
        if (pi < 0 || live_start(pi, f.ptr)) return;
        ptr = f.ptr;
        what = "cpool_free (already freed)";
        break;
    }
    case 1: { /* another pool's */
        for (int i = 0; i < NALLOC && !ptr; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool != pi) ptr = A[(b + i) % NALLOC].ptr;
        if (!ptr) ptr = &local;
        what = "cpool_free (another pool's pointer)";
        break;
    }
    case 2: { /* inside a live allocation */
        int ai = -1;
        for (int i = 0; i < NALLOC && ai < 0; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool == pi) ai = (b + i) % NALLOC;
        if (ai < 0) return;
        ptr = (char *)A[ai].ptr + (A[ai].size > 512 && (v & 8) ? 512 : 1);
        what = "cpool_free (a pointer inside an allocation)";
        break;
    }
    case 3:
        ptr = &local;
        what = "cpool_free (a stack pointer)";
        break;
    case 4:
        ptr = NULL;
        what = "cpool_free (NULL)";
        break;
    default: { /* NULL stream, with a valid pointer */
        int ai = -1;
        for (int i = 0; i < NALLOC && ai < 0; i++)
            if (A[(b + i) % NALLOC].live && A[(b + i) % NALLOC].pool == pi) ai = (b + i) % NALLOC;
        ptr = ai >= 0 ? A[ai].ptr : &local;
        stream = NULL;
        what = "cpool_free (NULL stream)";
        break;
    }
    }
    TRACE("%s #%u %p on stream %d\n", what, P[pi].uid, ptr, s);
    cpool_pool_stats before = stats_of(pi);
    check_status(cpool_free(P[pi].p, ptr, stream), CPOOL_ERR_INVALID_ARGUMENT, what, true);
    cpool_pool_stats after = stats_of(pi);
    if (memcmp(&before, &after, sizeof before)) fail("pool #%u: %s changed the statistics", P[pi].uid, what);
}

/* Many small allocations at once (the allocator's address map grows past
 * 128 live blocks), or many frees in a strided order. */
void op_bulk(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r), n = u8(r);
    if (v & 1) {
        int stride = 1 + (v >> 1) % 7, count = 0;
        TRACE("bulk free from slot %d, stride %d, on stream %d\n", n, stride, s);
        for (int k = 0; k < NALLOC && count < 96; k++) {
            int ai = (int)(((unsigned)n + (unsigned)k * (unsigned)stride) % NALLOC);
            if (A[ai].live && usable(A[ai].pool) && !capture_frees_suspended(ai, s)) {
                do_free_valid(ai, s);
                count++;
            }
        }
        return;
    }
    int pi = pick_pool(b);
    if (pi < 0) return;
    int count = 8 + n % 121;
    TRACE("bulk alloc of %d blocks from #%u on stream %d\n", count, P[pi].uid, s);
    for (int k = 0; k < count; k++) do_alloc(pi, 1 + (size_t)(v * 131u + (unsigned)k * 37u) % 3000, s);
}

void op_memset(rd *r, int s) {
    uint8_t b = u8(r), v = u8(r), b2 = u8(r);
    int ai = pick_alloc(b, false);
    if (ai < 0) return;
    malloc_t *a = &A[ai];
    bool cap = C[s].active;
    /* Under capture: only memory of this capture (the graph holds its pool).
     * Outside: only on the allocation's own stream. */
    if (cap ? (!a->graph || a->cap_id != C[s].id) : a->stream != s) return;
    TRACE("memset %p (%zu bytes) on stream %d%s\n", a->ptr, a->size, s, cap ? " (capture)" : "");
    size_t head = a->size < 1024 ? a->size : 1024;
    if (P[a->pool].suspended) { /* (a capture's own memory never is) */
        EXPECT(cpool_memset_async(S[s], a->ptr, v, head), CPOOL_ERR_SUSPENDED);
        return;
    }
    EXPECT_OK(cpool_memset_async(S[s], a->ptr, v, head));
    if (a->size > head) {
        size_t tail = a->size - head < 256 ? a->size - head : 256;
        EXPECT_OK(cpool_memset_async(S[s], (char *)a->ptr + a->size - tail, v, tail));
    }
    if (v & 1) { /* a copy into another allocation of the same kind */
        int bi = -1;
        for (int i = 0; i < NALLOC && bi < 0; i++) {
            malloc_t *c = &A[(b2 + i) % NALLOC];
            if (c->live && (cap ? (c->graph && c->cap_id == C[s].id) : c->stream == s)) bi = (b2 + i) % NALLOC;
        }
        if (bi >= 0) {
            size_t n = a->size < A[bi].size ? a->size : A[bi].size;
            if (n > 1024) n = 1024;
            if (P[A[bi].pool].suspended)
                EXPECT(cpool_memcpy_async(S[s], A[bi].ptr, a->ptr, n), CPOOL_ERR_SUSPENDED);
            else
                EXPECT_OK(cpool_memcpy_async(S[s], A[bi].ptr, a->ptr, n));
        }
    }
    if (!cap) enqueue_marker(s);
}

static void fn_tick(void *arg) {
    in_host++;
    atomic_fetch_add(&((tick *)arg)->ran, 1);
    in_host--;
}

void op_tick(rd *r, int s) {
    uint8_t v = u8(r);
    if (v % 8 == 7) {
        EXPECT(cpool_launch_host(S[s], NULL, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    if (C[s].active) {
        TRACE("tick (captured) on stream %d\n", s);
        EXPECT_OK(cpool_launch_host(S[s], fn_tick, C[s].tk));
        C[s].ticks++;
        return;
    }
    TRACE("marker on stream %d\n", s);
    enqueue_marker(s);
}

void op_gate(int s) {
    if (C[s].active) return;
    pthread_mutex_lock(&gate_mu);
    uint64_t epoch = ++gate_closed[s];
    pthread_mutex_unlock(&gate_mu);
    TRACE("gate on stream %d\n", s);
    EXPECT_OK(cpool_launch_host(S[s], fn_gate, (void *)(uintptr_t)(epoch << 3 | (uint64_t)s)));
    enq[s]++;
}

/* ---- operations: parameter blocks ------------------------------------------------- */

void op_param_create(rd *r) {
    uint8_t b = u8(r), c = u8(r);
    int pi = pick_pool(b);
    if (pi < 0) return;
    mpool *m = &P[pi];
    if (m->nparams == NPARAM) return;
    static const size_t sizes[16] = {0, 1, 4, 8, 64, 255, 256, 4096, 65536, MIB, MIB + 1, 3 * MIB, 8, 16,
                                     ((size_t)1 << 47) + 1, SIZE_MAX};
    size_t size = sizes[c % 16];
    bool huge = size > HUGE_LIMIT, bounded = m->max_reserved != 0;
    TRACE("param_create #%u %zu bytes\n", m->uid, size);
    if (bounded || huge) before_blocking();
    cpool_pool_stats before = stats_of(pi);
    cpool_param *prm = NULL;
    char kept[512];
    snprintf(kept, sizeof kept, "%s", cpool_last_error());
    cpool_status st = cpool_param_create(m->p, size, &prm);
    if (st == CPOOL_OK) check_error_kept(kept, "cpool_param_create");
    expect_alloc_status(st, size == 0, m->sealed, m->suspended, huge, bounded, "cpool_param_create");
    if (st != CPOOL_OK) {
        check_failed_alloc(pi, &before, st, huge, size, "cpool_param_create");
        if (prm) fail("a failed cpool_param_create set its output");
        return;
    }
    void *ptr = cpool_param_device_ptr(prm);
    check_new_block(pi, ptr, size, -1, true, "cpool_param_create");
    m->params[m->nparams++] = (mparam){prm, ptr, size, -1};
    m->live_bytes += size;
    m->live_count++;
    m->allocs++;
}

void op_param_set(rd *r, int s) {
    uint8_t b = u8(r), k = u8(r), v = u8(r);
    unsigned char value[64];
    for (int i = 0; i < 64; i++) value[i] = (unsigned char)(v * 31 + i * 7);
    int pi = pick_resident_pool(b);
    if (pi < 0 || !P[pi].nparams) return;
    mpool *m = &P[pi];
    mparam *q = &m->params[k % m->nparams];
    size_t n = 1 + v % (q->size < 64 ? q->size : 64);
    switch (v % 8) {
    case 0:
        EXPECT(cpool_param_set(q->prm, value, 0, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 1: /* more than the block holds: it must not read value at all */
        EXPECT(cpool_param_set(q->prm, value, q->size + 1, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 2:
        EXPECT(cpool_param_set(q->prm, NULL, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    case 3:
        EXPECT(cpool_param_set(NULL, value, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_param_set(q->prm, value, n, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    default:
        break;
    }
    if (C[s].active) {
        EXPECT(cpool_param_set(q->prm, value, n, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    TRACE("param_set #%u %zu bytes on stream %d (home %d)\n", m->uid, n, s, q->home);
    if (q->home < 0) q->home = s;
    if (q->home != s) {
        /* Another stream: order it with the home stream's checks. */
        if (C[q->home].active) return;
        do_sync(q->home);
        EXPECT_OK(cpool_param_set(q->prm, value, n, S[s]));
        memset(value, 0xEE, sizeof value);
        do_sync(s);
        return;
    }
    EXPECT_OK(cpool_param_set(q->prm, value, n, S[s]));
    cbtask *t = calloc(1, sizeof *t);
    if (!t) abort();
    t->kind = CB_PARAM_CHECK;
    t->ptr = q->ptr;
    t->n = n;
    memcpy(t->val, value, n);
    memset(value, 0xEE, sizeof value); /* the caller may reuse it at once */
    enqueue_task(s, t);
}

/* ---- operations: capture and graphs ------------------------------------------------ */

static cpool_capture_mode decode_mode(uint8_t v, bool *bad) {
    *bad = v % 4 == 3;
    return *bad ? (cpool_capture_mode)7 : (cpool_capture_mode)(v % 4);
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
    bool bounded = false;
    for (int i = 0; i < C[s].nh; i++) bounded = bounded || P[C[s].h[i].pool].max_reserved != 0;
    cpool_status st = cpool_capture_end(S[s], &g);
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
        bool bounded = false;
        for (int i = 0; i < c.fresh.nh; i++) bounded = bounded || P[c.fresh.h[i].pool].max_reserved != 0;
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

enum { FRESH, STALE, MAYBE };

static int staleness(const mgraph *g) {
    if (g->known_stale) return STALE;
    int r = FRESH;
    for (int i = 0; i < g->nh; i++) {
        const mpool *m = &P[g->h[i].pool];
        if (g->h[i].hi < m->gen) return STALE;
        if (g->h[i].lo != g->h[i].hi || m->pending_clears || g->h[i].lo != m->gen || nest_risk(m)) r = MAYBE;
    }
    return r;
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

/* ---- operations: callbacks, streams, misc ------------------------------------------ */

void op_callback(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    if (C[s].active || npend == NPENDING) return;
    int kind = v % 4 == 3 ? CB_REFUSE : v % 4;
    bool sync = (v >> 2) & 1, wait = (v >> 3) & 1;
    cbtask *t = calloc(1, sizeof *t);
    if (!t) abort();
    t->kind = kind;
    cpool_graph *dying_graph = NULL;
    if (kind == CB_REFUSE) {
        int pi = pick_pool(b);
        TRACE("callback on stream %d: synchronize and trim (refused there)\n", s);
        t->own = S[s];
        t->other = S[(s + 1 + b % 2) % NFIXED]; /* never s */
        t->pool = pi >= 0 ? P[pi].p : NULL;
    } else if (kind == CB_RELEASE_GRAPH) {
        int gi = pick_graph(b);
        if (gi < 0) {
            free(t);
            return;
        }
        TRACE("callback on stream %d: release graph %d\n", s, gi);
        t->graph = G[gi].g;
        if (G[gi].refs == 1) dying_graph = G[gi].g;
        graph_release_model(gi, false);
        /* The last release in a callback hands the teardown (which drops
         * the graph's pool references) to the library's thread. */
        sync = true;
        wait = wait || dying_graph;
    } else {
        int pi = pick_pool(b);
        if (pi < 0) {
            free(t);
            return;
        }
        mpool *m = &P[pi];
        /* The harness's last reference stays while objects hold references
         * of their own (release_pool_ref). */
        if (kind == CB_RELEASE_POOL && m->harness == 1 && atomic_load(&drop_refs[m->uid]) > 0) {
            free(t);
            return;
        }
        TRACE("callback on stream %d: %s #%u%s\n", s, kind == CB_RELEASE_POOL ? "release" : "clear and release", m->uid,
              sync ? ", then sync" : "");
        t->pool = m->p;
        if (kind == CB_RELEASE_POOL) {
            m->harness--; /* the callback takes the harness's reference */
        } else {
            cpool_pool_retain(m->p);
            mark_droppable(m->uid, CTX_UNKNOWN);
            m->pending_clears++;
            m->records_unknown = true;
            m->deferred = true;
        }
        m->cb_refs++;
        pend[npend++] = (pending_cb){s, kind, pi};
        pool_refs_changed(pi, false);
    }
    enqueue_task(s, t);
    if (sync) do_sync(s);
    if (dying_graph) push_dead(dead_graphs, &ndead_graphs, dying_graph); /* its handle died in the callback */
    if (wait) do_wait_deferred();
}

/* The temporary stream is gone for new work: what named it as a home. */
static void forget_temp_users(void) {
    for (int pi = 0; pi < NPOOL; pi++)
        for (int k = 0; k < P[pi].nparams; k++)
            if (P[pi].params[k].home == TEMP) P[pi].params[k].home = -1;
    for (int a = 0; a <= NALLOC; a++)
        if (A[a].stream == TEMP) A[a].stream = -1;
}

/* The temporary stream's work has all run: memory freed on it is free. */
static void forget_temp_freed(void) {
    for (int pi = 0; pi < NPOOL; pi++) {
        mpool *m = &P[pi];
        for (int k = 0; k < m->nfreed;)
            if (m->freed[k].stream == TEMP)
                m->freed[k] = m->freed[--m->nfreed];
            else
                k++;
    }
}

void destroy_temp(void) {
    TRACE("destroy the temporary stream%s\n", C[TEMP].active ? " (capturing)" : "");
    before_blocking();
    if (C[TEMP].active) capture_drop(TEMP, true);
    cpool_stream *h = S[TEMP];
    cpool_stream_destroy(h);
    run_verifies();
    if (atomic_load(&done[TEMP]) != enq[TEMP]) fail("a destroyed stream did not finish its work");
    resolve(TEMP);
    S[TEMP] = NULL;
    timed_epoch = 0;
    forget_temp_users();
    forget_temp_freed();
    memset(&C[TEMP], 0, sizeof C[TEMP]);
    events_temp_gone();
    push_dead(dead_streams, &ndead_streams, h);
}

/* How a dying temporary stream is being destroyed (op_temp_dying). */
enum { DIE_HERE, DIE_CALLBACK, DIE_OWN_CALLBACK, DIE_THREAD };
static int dying_how;
static int dying_cb_stream;    /* DIE_CALLBACK, DIE_OWN_CALLBACK: the callback's stream ... */
static uint64_t dying_cb_mark; /* ... and enq there once it was enqueued */
static cpool_stream *dying_handle;
static pthread_t destroyer;

static void *destroyer_main(void *arg) {
    cpool_stream_destroy(arg);
    return NULL;
}

/* Waits until stream s finished `mark` tasks (never for long: its gates
 * are open, a timed one opens by itself). */
static void wait_done(int s, uint64_t mark, const char *what) {
    for (long spins = 0; atomic_load(&done[s]) < mark; spins++) {
        if (spins > 2000000) fail("%s: stream %d did not run its work in time (a hang)", what, s);
        struct timespec ts = {0, 10000};
        nanosleep(&ts, NULL);
    }
}

/* Once the destroy of a dying temporary stream is known to be over: its
 * work ran, its handle is dead, its memory is free for all. */
void reap_temp(void) {
    if (!temp_dying) return;
    TRACE("reap the destroyed temporary stream\n");
    timed_epoch = 0;
    before_blocking();
    if (dying_how == DIE_THREAD) {
        pthread_join(destroyer, NULL);
    } else {
        wait_done(dying_cb_stream, dying_cb_mark, "the callback that destroys the temporary stream");
        cpool_wait_deferred(); /* the destroy it handed to the library's thread */
    }
    if (atomic_load(&done[TEMP]) != enq[TEMP]) fail("a destroyed stream did not finish its work");
    temp_dying = false;
    resolve(TEMP);
    forget_temp_freed();
    events_temp_gone();
    push_dead(dead_streams, &ndead_streams, dying_handle);
}

void op_temp_stream(void) {
    if (S[TEMP]) {
        destroy_temp();
        return;
    }
    reap_temp();
    TRACE("create the temporary stream\n");
    enq[TEMP] = 0;
    snap[TEMP] = 0;
    atomic_store(&done[TEMP], 0);
    EXPECT_OK(cpool_stream_create(dev, &S[TEMP]));
    if (!S[TEMP]) fail("cpool_stream_create succeeded with a NULL stream");
}

static void probe_dead_stream(cpool_stream *h, int s, uint8_t b);

/* Destroys the temporary stream while a timed gate holds its work back:
 * here (the destroy waits for the gate), from a callback on a fixed stream
 * or on the stream itself (the library's thread destroys it), or on a
 * thread of the harness. Before the gate, a block of a pool may be used by
 * its work and freed on it. Meanwhile this thread races the destroy: a
 * trim, a clear, a release (each must wait for the dying stream's work), an
 * allocation on another stream or under capture (must not get the block
 * before that work ran), a cpool_wait_deferred, or calls with dead stream
 * handles. */
void op_temp_dying(rd *r) {
    uint8_t v = u8(r), b = u8(r), c = u8(r);
    size_t size = decode_size(r);
    if (!S[TEMP] || temp_dying) return;
    int how = v % 4, race = (v >> 2) % 8;
    unsigned ms = 1 + (v >> 5) % 4;
    int f = c % NFIXED, t = (c >> 4) % NFIXED;
    bool capturing = C[TEMP].active;
    if (capturing || (how == DIE_CALLBACK && in_capture(f))) how = DIE_HERE; /* a capture ends with the destroy, here */
    int pi = pick_resident_pool(b);
    TRACE("destroy the temporary stream with pending work: how %d, race %d, gate %u ms\n", how, race, ms);
    if (!capturing) {
        int ai = -1;
        if ((c & 8) && pi >= 0 && !P[pi].sealed && size && size <= HUGE_LIMIT) ai = do_alloc_want(pi, size, TEMP, -1);
        pthread_mutex_lock(&gate_mu);
        uint64_t epoch = ++gate_closed[TEMP];
        pthread_mutex_unlock(&gate_mu);
        timed_epoch = epoch;
        EXPECT_OK(cpool_launch_host(S[TEMP], fn_timed_gate, (void *)(uintptr_t)(epoch << 8 | (uint64_t)ms << 3 | TEMP)));
        enq[TEMP]++;
        if (ai >= 0) { /* work on the block behind the gate, then the free: no one else may have it before */
            size_t n = A[ai].size < 4096 ? A[ai].size : 4096;
            EXPECT_OK(cpool_memset_async(S[TEMP], A[ai].ptr, (int)c, n));
            enqueue_marker(TEMP);
            do_free_valid(ai, TEMP);
        }
    }
    cpool_stream *h = S[TEMP];
    if (how == DIE_HERE) {
        destroy_temp(); /* waits for the timed gate */
        return;
    }
    if (how == DIE_CALLBACK || how == DIE_OWN_CALLBACK) {
        int cs = how == DIE_CALLBACK ? f : TEMP;
        cbtask *task = calloc(1, sizeof *task);
        if (!task) abort();
        task->kind = CB_DESTROY_STREAM;
        task->own = h;
        enqueue_task(cs, task);
        dying_cb_stream = cs;
        dying_cb_mark = enq[cs];
    } else if (pthread_create(&destroyer, NULL, destroyer_main, h) != 0) {
        destroy_temp();
        return;
    }
    dying_how = how;
    dying_handle = h;
    temp_dying = true;
    S[TEMP] = NULL;
    memset(&C[TEMP], 0, sizeof C[TEMP]);
    forget_temp_users();
    switch (race) {
    case 1:
        if (pi < 0) break;
        TRACE("race: trim #%u\n", P[pi].uid);
        do_trim(pi, "cpool_pool_trim racing a stream's destroy");
        break;
    case 2:
        if (pi < 0) break;
        TRACE("race: clear #%u\n", P[pi].uid);
        do_clear(pi);
        break;
    case 3:
        if (pi < 0) break;
        TRACE("race: release #%u (harness refs %d)\n", P[pi].uid, P[pi].harness);
        release_pool_ref(pi);
        break;
    case 4: /* on a fixed stream: outside capture, or under its capture */
        if (pi < 0 || P[pi].sealed || !size || size > HUGE_LIMIT) break;
        TRACE("race: alloc on stream %d\n", t);
        do_alloc(pi, size, t);
        break;
    case 5: /* a new capture on a fixed stream, left open */
        if (pi < 0 || P[pi].sealed || in_capture(t) || !size || size > HUGE_LIMIT) break;
        TRACE("race: capture on stream %d with #%u and alloc\n", t, P[pi].uid);
        EXPECT_OK(cpool_capture_begin(S[t], P[pi].p, CPOOL_CAPTURE_GLOBAL));
        model_capture_begin(t, pi, CPOOL_CAPTURE_GLOBAL);
        do_alloc(pi, size, t);
        break;
    case 6:
        TRACE("race: wait_deferred\n");
        do_wait_deferred();
        break;
    case 7:
        if (!ndead_streams) break;
        TRACE("race: calls with a dead stream handle\n");
        probe_dead_stream(dead_streams[(ndead_streams - 1) % NDEAD], t, b);
        break;
    default:
        break;
    }
}

static int dummy_body_calls;
static cpool_status dummy_body(cpool_stream *s, void *ctx) {
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
static void probe_dead_stream(cpool_stream *h, int s, uint8_t b) {
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

/* On unless FUZZ_API_CROSS_DROPS=0. */
bool cross_drops;

static pthread_mutex_t watch_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t watch_cv = PTHREAD_COND_INITIALIZER;
static bool watch_armed;

/* Fails the input when the calls it watches have not returned in 10 s. */
static void *watchdog_main(void *arg) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&watch_mu);
    while (watch_armed)
        if (pthread_cond_timedwait(&watch_cv, &watch_mu, &deadline) == ETIMEDOUT && watch_armed)
            fail("%s: no return in 10 s (a deadlock)", (const char *)arg);
    pthread_mutex_unlock(&watch_mu);
    return NULL;
}

static void *clear_main(void *pool) {
    cpool_pool_clear_buffers(pool);
    return NULL;
}

/* Two pools, each with an object whose drop clears the other; a thread of
 * the harness clears one while this thread clears the other, so each drop
 * clears a pool whose clear is dropping on the other thread. Nothing may
 * deadlock; every object of both is dropped once. */
void op_cross_clear(rd *r) {
    uint8_t b = u8(r), c = u8(r);
    int x = pick_pool(b), y = pick_pool(c);
    if (!cross_drops || x < 0 || y < 0 || x == y) return;
    mpool *mx = &P[x], *my = &P[y];
    if (mx->deferred || my->deferred || mx->pending_clears || my->pending_clears) return;
    pthread_mutex_lock(&drop_mu);
    if (nobj + 2 > NOBJ) {
        pthread_mutex_unlock(&drop_mu);
        return;
    }
    TRACE("cross clear of #%u (here) and #%u (another thread), each one's drop clears the other\n", mx->uid, my->uid);
    obj *ox = &objs[nobj++], *oy = &objs[nobj++];
    *ox = (obj){.used = true, .uid = mx->uid, .serial = next_serial[mx->uid]++, .kind = DROP_CROSS, .pool = mx->p,
                .other = my->p, .other_uid = my->uid};
    *oy = (obj){.used = true, .uid = my->uid, .serial = next_serial[my->uid]++, .kind = DROP_CROSS, .pool = my->p,
                .other = mx->p, .other_uid = mx->uid};
    check_status(cpool_pool_record(mx->p, ox, drop_cb, NULL), CPOOL_OK, "cpool_pool_record", true);
    check_status(cpool_pool_record(my->p, oy, drop_cb, NULL), CPOOL_OK, "cpool_pool_record", true);
    pthread_mutex_unlock(&drop_mu);
    before_blocking();
    mark_droppable(mx->uid, CTX_ALIVE);
    mark_droppable(my->uid, CTX_ALIVE);
    mx->gen++;
    my->gen++;
    mx->records = my->records = 0;
    atomic_store(&cross_met, 0);
    pthread_t watchdog, clearer;
    watch_armed = true;
    if (pthread_create(&watchdog, NULL, watchdog_main, "cpool_pool_clear_buffers of two pools whose drops clear each other"))
        abort();
    if (pthread_create(&clearer, NULL, clear_main, my->p)) abort();
    cpool_pool_clear_buffers(mx->p);
    pthread_join(clearer, NULL);
    pthread_mutex_lock(&watch_mu);
    watch_armed = false;
    pthread_cond_broadcast(&watch_cv);
    pthread_mutex_unlock(&watch_mu);
    pthread_join(watchdog, NULL);
    verify_dropped(mx->uid, "after two clears whose drops clear each other's pool");
    verify_dropped(my->uid, "after two clears whose drops clear each other's pool");
    absorb_nested(x);
    absorb_nested(y);
}

/* Waits for stream t's work without opening any gate: true if it has no
 * closed gate (and is idle now), false if a gate holds it back. */
static bool sync_quietly(int t) {
    if (stream_held(t) || in_capture(t)) return false; /* a gate of its own, or one an event wait of t waits for */
    EXPECT_OK(cpool_stream_synchronize(S[t]));
    if (atomic_load(&done[t]) != enq[t])
        fail("stream %d synchronized with %llu of %llu tasks done", t, (unsigned long long)atomic_load(&done[t]),
             (unsigned long long)enq[t]);
    resolve(t);
    events_synced(t);
    return true;
}

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
        do_alloc(pi, size, t);
        if (v & 4) do_alloc(pi, size, s);
    }
    if (v & 8) { /* the gated work runs: now the block may go to a capture */
        TRACE("open gates\n");
        open_gates();
        do_alloc(pi, size, t);
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

/* ---- operations: alloc and free; a body's steps ----------------------------------- */

void op_alloc(rd *r, int s) {
    uint8_t b = u8(r);
    size_t size = decode_size(r);
    int pi = pick_pool(b);
    if (pi >= 0) do_alloc(pi, size, s);
}

void op_free(rd *r, int s) {
    int ai = pick_alloc(u8(r), true);
    if (ai >= 0 && !capture_frees_suspended(ai, s)) do_free_valid(ai, s);
}

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

/* ---- operations: events ------------------------------------------------------------ */

/* A live event's slot for byte b, or -1. */
static int pick_event(uint8_t b) {
    for (int k = 0; k < NEVENT; k++)
        if (E[(b + k) % NEVENT].e) return (b + k) % NEVENT;
    return -1;
}

/* A dead event handle for byte b, or NULL. */
static cpool_event *pick_dead_event(uint8_t b) {
    unsigned n = ndead_events;
    if (!n) return NULL;
    return dead_events[(n - 1 - b % (n < NDEAD ? n : NDEAD)) % NDEAD];
}

/* Byte b's dead stream handle, or NULL. */
static cpool_stream *pick_dead_stream(uint8_t b) {
    unsigned n = ndead_streams;
    if (!n) return NULL;
    return dead_streams[(n - 1 - b % (n < NDEAD ? n : NDEAD)) % NDEAD];
}

/* The model's reading of event ei: true while a closed gate holds back the
 * work before its record (it cannot be complete). */
static bool event_held(int ei) {
    const mevent *m = &E[ei];
    if (!m->recorded || m->complete) return false;
    bool held = false;
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS; x++)
        if (gate_opened[x] < m->gates[x]) held = true;
    pthread_mutex_unlock(&gate_mu);
    return held;
}

/* The work before event ei's record has run, as far as the model counts it. */
static void check_event_work_ran(int ei, const char *what) {
    const mevent *m = &E[ei];
    if (!m->recorded) return;
    for (int x = 0; x < NS; x++)
        if (atomic_load(&done[x]) < m->marks[x])
            fail("%s: event %d (recorded on stream %d) is complete, but stream %d ran %llu of the %llu tasks before "
                 "its record",
                 what, ei, m->stream, x, (unsigned long long)atomic_load(&done[x]), (unsigned long long)m->marks[x]);
}

/* A query, checked against the model: OK when never recorded or known
 * complete, NOT_READY while a gate holds its work back, else either (and OK
 * only once that work ran). */
static void query_event(int ei, const char *what) {
    cpool_status st = cpool_event_query(E[ei].e);
    if (E[ei].cap_id) { /* a captured record marks no stream work */
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, what, true);
        return;
    }
    if (!E[ei].recorded || E[ei].complete)
        check_status(st, CPOOL_OK, what, true);
    else if (event_held(ei))
        check_status(st, CPOOL_ERR_NOT_READY, what, true);
    else
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_NOT_READY, what);
    if (st == CPOOL_OK) check_event_work_ran(ei, what);
}

void op_event_create(rd *r) {
    uint8_t v = u8(r);
    int ei = -1;
    for (int k = 0; k < NEVENT && ei < 0; k++)
        if (!E[(v + k) % NEVENT].e) ei = (v + k) % NEVENT;
    if (v % 8 == 7) {
        cpool_event *e = (cpool_event *)&ei;
        EXPECT(cpool_event_create(NULL, &e), CPOOL_ERR_INVALID_ARGUMENT);
        EXPECT(cpool_event_create(dev, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    if (ei < 0) return;
    TRACE("event create %d\n", ei);
    cpool_event *e = NULL;
    EXPECT_OK(cpool_event_create(dev, &e));
    if (!e) fail("cpool_event_create succeeded with a NULL event");
    memset(&E[ei], 0, sizeof E[ei]);
    E[ei].e = e;
    E[ei].complete = true;
    E[ei].stream = -1;
    query_event(ei, "cpool_event_query of an event never recorded");
}

void op_event_destroy(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 4 == 3) { /* a dead one: refused with a reason, nothing else happens */
        cpool_event *h = pick_dead_event(b);
        if (!h) return;
        TRACE("event destroy of dead handle %p\n", (void *)h);
        EXPECT_REASON(cpool_event_destroy(h));
        EXPECT_DEAD(cpool_event_query(h));
        return;
    }
    if (v % 4 == 2) {
        cpool_event_destroy(NULL); /* a no-op */
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event destroy %d%s\n", ei, E[ei].recorded && !E[ei].complete ? " (maybe pending)" : "");
    cpool_event *h = E[ei].e;
    cpool_event_destroy(h);
    memset(&E[ei], 0, sizeof E[ei]);
    push_dead(dead_events, &ndead_events, h);
    EXPECT_DEAD(cpool_event_query(h));
}

void op_event_record(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) { /* a dead event, or a dead stream */
        cpool_event *h = pick_dead_event(b);
        cpool_stream *ds = pick_dead_stream(b);
        int ei = pick_event(b);
        TRACE("event record with dead handles\n");
        if (h) EXPECT_DEAD(cpool_event_record(h, S[s]));
        if (ds && ei >= 0) {
            EXPECT_DEAD(cpool_event_record(E[ei].e, ds));
            query_event(ei, "cpool_event_query after a record on a dead stream was refused");
        }
        EXPECT(cpool_event_record(NULL, S[s]), CPOOL_ERR_INVALID_ARGUMENT);
        if (ei >= 0) EXPECT(cpool_event_record(E[ei].e, NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    mevent *m = &E[ei];
    if (C[s].active) {
        TRACE("event record %d on capturing stream %d (into the capture)\n", ei, s);
        cpool_status st = cpool_event_record(m->e, S[s]);
        if (C[s].invalidated)
            expect_one_of(st, CPOOL_OK, CPOOL_ERR_CAPTURE_INVALIDATED, "cpool_event_record in an invalidated capture");
        else
            check_status(st, CPOOL_OK, "cpool_event_record on a capturing stream", true);
        if (st == CPOOL_OK) {
            m->recorded = true;
            m->cap_id = C[s].id;
            m->stream = s;
        }
        query_event(ei, "cpool_event_query after a record on a capturing stream");
        return;
    }
    TRACE("event record %d on stream %d\n", ei, s);
    EXPECT_OK(cpool_event_record(m->e, S[s]));
    m->cap_id = 0;
    m->recorded = true;
    m->complete = false;
    m->stream = s;
    pthread_mutex_lock(&gate_mu);
    for (int x = 0; x < NS; x++) {
        m->gates[x] = x == s ? gate_closed[s] : dep_gate[s][x];
        m->marks[x] = x == s ? enq[s] : dep_mark[s][x];
    }
    pthread_mutex_unlock(&gate_mu);
    if (v & 8) query_event(ei, "cpool_event_query right after the record");
}

/* A marker behind a wait: the work before the event's record on the fixed
 * streams has run (the temporary stream's counters may start again). */
typedef struct wait_check {
    int stream, ev;
    uint64_t marks[NFIXED];
} wait_check;

static void fn_wait_check(void *arg) {
    in_host++;
    wait_check *w = arg;
    for (int x = 0; x < NFIXED; x++)
        if (atomic_load(&done[x]) < w->marks[x])
            fail("work enqueued on stream %d after cpool_stream_wait_event (event %d) ran before stream %d's work "
                 "before the record (%llu of %llu tasks done)",
                 w->stream, w->ev, x, (unsigned long long)atomic_load(&done[x]), (unsigned long long)w->marks[x]);
    int s = w->stream;
    free(w);
    atomic_fetch_add(&done[s], 1);
    in_host--;
}

void op_event_wait(rd *r, int s) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        cpool_stream *ds = pick_dead_stream(b);
        int ei = pick_event(b);
        TRACE("stream wait event with dead handles\n");
        if (h) EXPECT_DEAD(cpool_stream_wait_event(S[s], h));
        if (ds && ei >= 0) EXPECT_DEAD(cpool_stream_wait_event(ds, E[ei].e));
        EXPECT(cpool_stream_wait_event(S[s], NULL), CPOOL_ERR_INVALID_ARGUMENT);
        if (ei >= 0) EXPECT(cpool_stream_wait_event(NULL, E[ei].e), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    mevent *m = &E[ei];
    if (m->cap_id) {
        const mcapture *c = &C[m->stream];
        bool live = c->active && c->id == m->cap_id;
        if (live && !C[s].active) return; /* it would fork s: op_fork does that, with the model told */
        TRACE("stream %d waits for event %d, recorded in a capture on %d%s\n", s, ei, m->stream,
              live ? "" : " (ended)");
        cpool_status st = cpool_stream_wait_event(S[s], m->e);
        if (live && s == m->stream && c->invalidated)
            expect_one_of(st, CPOOL_OK, CPOOL_ERR_CAPTURE_INVALIDATED, "cpool_stream_wait_event in an invalidated capture");
        else if (live && s == m->stream)
            check_status(st, CPOOL_OK, "cpool_stream_wait_event for its own capture's record", true);
        else /* another capture's record, or one of a capture that ended */
            check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_stream_wait_event for another capture's record", true);
        return;
    }
    if (C[s].active) {
        TRACE("stream %d (capturing) waits for event %d, recorded outside any capture\n", s, ei);
        check_status(cpool_stream_wait_event(S[s], m->e), m->recorded ? CPOOL_ERR_INVALID_ARGUMENT : CPOOL_OK,
                     "cpool_stream_wait_event on a capturing stream for an event recorded outside it", true);
        return;
    }
    TRACE("stream %d waits for event %d (recorded on %d)\n", s, ei, m->recorded ? m->stream : -1);
    EXPECT_OK(cpool_stream_wait_event(S[s], m->e));
    if (m->recorded)
        for (int x = 0; x < NS; x++) {
            if (m->gates[x] > dep_gate[s][x]) dep_gate[s][x] = m->gates[x];
            if (m->marks[x] > dep_mark[s][x]) dep_mark[s][x] = m->marks[x];
        }
    if (!(v & 8)) {
        wait_check *w = calloc(1, sizeof *w);
        if (!w) abort();
        w->stream = s;
        w->ev = ei;
        if (m->recorded)
            for (int x = 0; x < NFIXED; x++) w->marks[x] = m->marks[x];
        EXPECT_OK(cpool_launch_host(S[s], fn_wait_check, w));
        enq[s]++;
    }
}

void op_event_query(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        if (h) EXPECT_DEAD(cpool_event_query(h));
        EXPECT(cpool_event_query(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event query %d%s\n", ei, event_held(ei) ? " (held back by a gate)" : "");
    query_event(ei, "cpool_event_query");
}

void op_event_sync(rd *r) {
    uint8_t v = u8(r), b = u8(r);
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        if (h) EXPECT_DEAD(cpool_event_synchronize(h));
        EXPECT(cpool_event_synchronize(NULL), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int ei = pick_event(b);
    if (ei < 0) return;
    TRACE("event synchronize %d\n", ei);
    if (E[ei].cap_id) {
        EXPECT(cpool_event_synchronize(E[ei].e), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    before_blocking();
    EXPECT_OK(cpool_event_synchronize(E[ei].e));
    check_event_work_ran(ei, "cpool_event_synchronize");
    if (E[ei].recorded) E[ei].complete = true;
    query_event(ei, "cpool_event_query after cpool_event_synchronize");
}

void op_event_elapsed(rd *r) {
    uint8_t v = u8(r), b = u8(r), c = u8(r);
    float ms = -1.0f;
    if (v % 8 == 7) {
        cpool_event *h = pick_dead_event(b);
        int ei = pick_event(c);
        if (h) EXPECT_DEAD(cpool_event_elapsed_ms(h, ei >= 0 ? E[ei].e : h, &ms));
        if (h && ei >= 0) EXPECT_DEAD(cpool_event_elapsed_ms(E[ei].e, h, &ms));
        EXPECT(cpool_event_elapsed_ms(NULL, NULL, &ms), CPOOL_ERR_INVALID_ARGUMENT);
        return;
    }
    int a = pick_event(b), z = pick_event(c);
    if (a < 0 || z < 0) return;
    TRACE("event elapsed %d -> %d\n", a, z);
    cpool_status st = cpool_event_elapsed_ms(E[a].e, E[z].e, &ms);
    const char *what = "cpool_event_elapsed_ms";
    if (E[a].cap_id || E[z].cap_id)
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms with a captured record", true);
    else if (!E[a].recorded || !E[z].recorded)
        check_status(st, CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms with an event never recorded", true);
    else if (E[a].complete && E[z].complete)
        check_status(st, CPOOL_OK, "cpool_event_elapsed_ms of two complete records", true);
    else if (event_held(a) || event_held(z))
        check_status(st, CPOOL_ERR_NOT_READY, "cpool_event_elapsed_ms with a record held back by a gate", true);
    else
        expect_one_of(st, CPOOL_OK, CPOOL_ERR_NOT_READY, what);
    if (st == CPOOL_OK) {
        check_event_work_ran(a, what);
        check_event_work_ran(z, what);
        if (ms != ms) fail("cpool_event_elapsed_ms returned NaN");
        if (a == z && ms != 0.0f) fail("cpool_event_elapsed_ms of an event to itself is %f ms, not 0", (double)ms);
    }
}

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

/* The end of an input: every event destroyed, some perhaps still pending. */
void destroy_events(void) {
    for (int ei = 0; ei < NEVENT; ei++)
        if (E[ei].e) {
            cpool_event_destroy(E[ei].e);
            push_dead(dead_events, &ndead_events, E[ei].e);
            memset(&E[ei], 0, sizeof E[ei]);
        }
}

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
    if (after.reserved_bytes != res.reserved || after.graph_reserved_bytes != res.graph ||
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
    m->kept = mode == CPOOL_SUSPEND_KEEP_CONTENTS;
    if (m->graph_holds == 0) m->ngr = 0; /* it trimmed first, as cpool_pool_trim: graph memory is general again */
    check_pool(pi);
    cpool_pool_stats during = stats_of(pi);
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
