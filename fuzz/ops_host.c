/*
 * ops_host.c: the host callbacks and syncs that every family of the
 * fuzz_api harness's operations uses (declared in ops.h and
 * ops_internal.h): markers that count a stream's work done (fn_marker),
 * tasks that release, clear, check a parameter block, call what a callback
 * must be refused, or destroy a stream (fn_task), and the syncs that bring
 * the model up to date once a stream's work ran (resolve, do_sync,
 * do_wait_deferred, sync_quietly). It calls no other operation file.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- host callbacks: markers and tasks ------------------------------------------- */

_Thread_local int in_host;

void fn_marker(void *arg) {
    in_host++;
    atomic_fetch_add(&done[(uintptr_t)arg], 1);
    in_host--;
}


/* ---- stream helpers ------------------------------------------------------------ */

void enqueue_marker(int s) {
    EXPECT_OK(cpool_launch_host(S[s], fn_marker, (void *)(uintptr_t)s));
    enq[s]++;
}

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

void enqueue_task(int s, cbtask *t) {
    t->stream = s;
    EXPECT_OK(cpool_launch_host(S[s], fn_task, t));
    enq[s]++;
}

/* Applies the callbacks on stream s, which have run now. */
void resolve(int s) {
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

/* Waits for stream t's work without opening any gate: true if it has no
 * closed gate (and is idle now), false if a gate holds it back. */
bool sync_quietly(int t) {
    if (stream_held(t) || in_capture(t)) return false; /* a gate of its own, or one an event wait of t waits for */
    EXPECT_OK(cpool_stream_synchronize(S[t]));
    if (atomic_load(&done[t]) != enq[t])
        fail("stream %d synchronized with %llu of %llu tasks done", t, (unsigned long long)atomic_load(&done[t]),
             (unsigned long long)enq[t]);
    resolve(t);
    events_synced(t);
    return true;
}

