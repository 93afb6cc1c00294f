/*
 * ops_streams.c: the fuzz_api harness's operations on streams (declared in
 * ops.h): markers and captured ticks (op_tick), gates and timed gates that
 * hold a stream back until the harness lets it go (op_gate, fn_gate,
 * fn_timed_gate), callbacks that release, clear or call what a callback is
 * refused (op_callback), the temporary stream (op_temp_stream), and its
 * destroy with pending work while this thread races it (op_temp_dying,
 * destroy_temp, reap_temp). The callbacks and syncs every family uses are
 * ops_host.c's.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capturepool.h"
#include "model.h"
#include "ops.h"
#include "ops_internal.h"

/* ---- operations: markers, captured ticks, gates ---------------------------------- */

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

/* ---- operations: callbacks ------------------------------------------------------- */

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

/* ---- operations: the temporary stream -------------------------------------------- */

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
    launches_temp_gone();
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
    launches_temp_gone();
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
