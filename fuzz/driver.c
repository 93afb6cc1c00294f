/*
 * driver.c: the entry points of fuzz_api, a libFuzzer harness that drives
 * random sequences of API calls on the host backend and checks the library
 * against a model after every step. This file holds LLVMFuzzerInitialize,
 * LLVMFuzzerTestOneInput, the dispatch of each step by its op byte (step),
 * and each input's setup (reset_model) and teardown with the end-of-input
 * checks (finish). The model, its state and the checks against it are
 * model.h and model.c; the operations and the callbacks they hand to the
 * library, ops.h and the ops_*.c files (one family of operations each).
 *
 * The input is a sequence of operations (see `step` for the op codes), each
 * followed by its argument bytes; missing bytes read as 0. The operations
 * work on small fixed tables: pools, graphs, allocations, parameter blocks
 * and recorded objects, and on three streams made once per process (plus one
 * temporary stream an input may create and destroy). After each step:
 * - cpool__pool_check() on every live pool (allocator and record invariants;
 *   the library is built with CPOOL_DEBUG_CHECKS, so the allocator also
 *   checks itself after each operation);
 * - the pool statistics against the model (allocated bytes, alloc/free
 *   counts, graphs holding the pool, seal, buffer count, bounds);
 * - every stream's capture state against the model.
 * Each call's status is checked where the contract determines it. On top:
 * - allocations never overlap; a block freed on stream S goes to another
 *   stream (or to a graph, or a parameter block) only once the work enqueued
 *   on S before the free has finished; memory allocated or freed under
 *   capture never goes to an allocation outside capture until a trim with no
 *   graph and no capture holding the pool;
 * - recorded objects are dropped exactly once, in registration order, never
 *   before the clear or the last release that drops them, never inside a
 *   stream callback, and (when the call was made on this thread) only after
 *   the stream work enqueued before the call has finished;
 * - a graph's captured work runs exactly once per successful launch, never at
 *   capture, never for a discarded capture, and a launch after a clear of a
 *   pool the graph holds returns CPOOL_ERR_STALE_GRAPH;
 * - at the end of each input everything is released; every object must have
 *   been dropped, and the device must hold no reference beyond the harness's
 *   own (a leaked pool, graph or capture keeps one). LeakSanitizer checks the
 *   rest.
 * Any violation prints a message and aborts.
 *
 * Stream work is made deterministic where it matters with "gates": a host
 * callback that blocks its stream until the harness opens the gates, which
 * it does before every call that may wait for stream work. A "timed gate"
 * opens by itself after a few milliseconds: it holds back the temporary
 * stream while that is destroyed with pending work (on this thread, from a
 * callback through the library's thread, or on a thread of the harness), so
 * that calls of this thread race the destroy and nothing can hang.
 *
 * Further checks of the second wave:
 * - a destroyed stream's work still counts: a trim, a clear's drops or a
 *   last release on this thread return only after it ran, and memory freed
 *   on it reaches no other stream, graph or parameter block before;
 * - a block allocated outside capture and freed inside a capture on S goes
 *   to no capture (on any stream) before S's work from before the capture
 *   ran;
 * - a bounded pool under capture: in a fresh pool whose only segment is
 *   idle (or held back by a gate), the allocation under capture must
 *   succeed (or fail) as the model says; any bounded failure must leave no
 *   room for the request's segment;
 * - drops that call the library on their own pool (nested clear, release of
 *   a reference the drop holds, cpool_wait_deferred, a record, calls on the
 *   dead handle in the final teardown), still once each and in order;
 * - dead handles (released pools, released graphs, destroyed streams, also
 *   after their memory went to a new handle) are refused and change
 *   nothing; a release beyond the callers' references is refused;
 * - inside a stream callback, synchronize and trim are refused at once.
 * Third wave (ops 37-43): events. A query is NOT_READY while a closed gate
 * holds back the work before the record (also through event waits), OK once
 * the record is known complete, and OK only after that work ran; work after
 * cpool_stream_wait_event runs after the work before the event's record;
 * a record on a capturing stream goes into the capture (queries refuse it),
 * a capturing stream waits only for its own capture's records, and waits
 * for another capture's or an ended one's are refused; elapsed, synchronize
 * and dead events are checked as documented.
 * Fourth wave (op 44): forks. A script of records, waits, allocations and
 * frees on the capture's streams: a wait by a fixed stream outside any
 * capture forks it in, a wait by one in it joins; then every fork is
 * joined back (the graph ends as usual) or one is left unjoined (the end
 * fails, its work never runs). The model keeps the capture's order as
 * vector clocks: a block freed on one stream is never handed to one whose
 * work is not ordered after the free (model.h, mcapture).
 * Fifth wave (ops 45-46): suspend and resume. While a pool is suspended its
 * stats say it holds no device memory, its snapshot's sums hold against
 * "suspended", and every call that would touch its memory (allocations,
 * sets, copies, launches and uploads of its graphs, captures bound to it)
 * is refused with CPOOL_ERR_SUSPENDED and changes nothing; frees, trims,
 * stats and releases work; the resume maps back what the snapshot said and,
 * after CPOOL_SUSPEND_KEEP_CONTENTS, the live blocks' bytes. A pool may stay
 * suspended across other operations until op_resume.
 *
 * FUZZ_API_TRACE=1 in the environment prints each operation as it runs.
 * FUZZ_API_CROSS_DROPS=0 turns off op_cross_clear (two clears on two threads
 * whose drops clear each other's pool, watched for a deadlock).
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "capturepool.h"
/* Only for the end-of-input reference count of the device (leak check). */
#include "internal.h"
#include "model.h"
#include "ops.h"

/* ---- sanitizer defaults ---------------------------------------------------- */

__attribute__((used, visibility("default"))) const char *__ubsan_default_options(void) {
    return "print_stacktrace=1:halt_on_error=1";
}

/* The device's reference count at the end of the last input (finish). */
static int dev_refs_prev = -1;

/* ---- one step: the dispatch by op byte ----------------------------------------------- */

static void step(rd *r) {
    uint8_t op = u8(r);
    int s = pick_stream(u8(r));
    if (fork_of[s] >= 0) s = fork_of[s]; /* a fork's own work is op_fork's */
    switch (op % 47) {
    case 0:
        op_pool_create(r);
        break;
    case 1:
        op_pool_retain(r);
        break;
    case 2:
        op_pool_release(r);
        break;
    case 3:
        op_record(r);
        break;
    case 4:
        op_clear(r);
        break;
    case 5:
        op_seal(r, true);
        break;
    case 6:
        op_seal(r, false);
        break;
    case 7:
    case 8:
        op_alloc(r, s);
        break;
    case 9:
        op_free(r, s);
        break;
    case 10:
        do_free_invalid(r, s);
        break;
    case 11:
        op_capture_begin(r, s);
        break;
    case 12:
        op_capture_end(r, s);
        break;
    case 13:
        op_scoped(r, s);
        break;
    case 14:
        op_launch(r, s);
        break;
    case 15:
        op_graph_retain(r);
        break;
    case 16:
        op_graph_release(r);
        break;
    case 17:
        op_trim(r);
        break;
    case 18:
        op_stats(r);
        break;
    case 19:
        if (u8(r) % 4 == 0) {
            TRACE("sync all streams\n");
            for (int i = 0; i < NS; i++)
                if (S[i] && fork_of[i] < 0) do_sync(i);
        } else {
            TRACE("sync stream %d\n", s);
            do_sync(s);
        }
        break;
    case 20:
        op_update(r, s);
        break;
    case 21:
        op_param_create(r);
        break;
    case 22:
        op_param_set(r, s);
        break;
    case 23:
        op_memset(r, s);
        break;
    case 24:
        op_tick(r, s);
        break;
    case 25:
        op_gate(s);
        break;
    case 26:
        TRACE("open gates\n");
        open_gates();
        break;
    case 27:
        op_callback(r, s);
        break;
    case 28:
        op_temp_stream();
        break;
    case 29:
        op_misc(r, s);
        break;
    case 31:
        op_bulk(r, s);
        break;
    case 32:
        op_temp_dying(r);
        break;
    case 33:
        op_eager_free(r, s);
        break;
    case 34:
        op_bounded_capture(r, s);
        break;
    case 35:
        op_dead(r, s);
        break;
    case 36:
        op_cross_clear(r);
        break;
    case 37:
        op_event_create(r);
        break;
    case 38:
        op_event_destroy(r);
        break;
    case 39:
        op_event_record(r, s);
        break;
    case 40:
        op_event_wait(r, s);
        break;
    case 41:
        op_event_query(r);
        break;
    case 42:
        op_event_sync(r);
        break;
    case 43:
        op_event_elapsed(r);
        break;
    case 44:
        op_fork(r, s);
        break;
    case 45:
        op_suspend(r, s);
        break;
    case 46:
        op_resume(r);
        break;
    default:
        TRACE("wait_deferred\n");
        do_wait_deferred();
        break;
    }
    check_all();
}

/* ---- each input: teardown and checks, setup; the entry points ---------------------- */

/* Ends every capture, releases every graph and pool, waits for everything,
 * then checks that nothing is left. */
static void finish(void) {
    TRACE("-- end of input --\n");
    before_blocking();
    for (int s = 0; s < NS; s++)
        if (S[s] && C[s].active) do_capture_end(s);
    destroy_events(); /* some may still be pending: waits on them still hold */
    destroy_launch_events();
    reap_temp();
    if (S[TEMP]) destroy_temp();
    for (int gi = 0; gi < NGRAPH; gi++)
        while (G[gi].g) release_graph_ref(gi);
    for (int pi = 0; pi < NPOOL; pi++)
        while (P[pi].state == SLOT_LIVE && P[pi].harness > 0) release_pool_ref(pi);
    for (int s = 0; s < NS; s++)
        if (S[s]) do_sync(s);
    do_wait_deferred();
    for (int pi = 0; pi < NPOOL; pi++)
        if (P[pi].state != SLOT_FREE) fail("harness model: pool slot %d still live at the end", pi);
    if (npend) fail("harness model: %d callbacks unresolved at the end", npend);
    for (unsigned uid = 0; uid < next_uid; uid++) verify_dropped(uid, "at the end of the input");
    while (ticks) {
        tick *t = ticks;
        ticks = t->next;
        if (atomic_load(&t->ran) != t->expected)
            fail("captured work ran %llu times, expected %llu (once per successful launch)",
                 (unsigned long long)atomic_load(&t->ran), (unsigned long long)t->expected);
        free(t);
    }
    for (int s = 0; s < NS; s++)
        if (S[s] && atomic_load(&done[s]) != enq[s]) fail("stream %d did not run all its work", s);
    /* Every pool, graph and capture holds a device reference: with all of
     * them gone, only the harness's own are left (the device, its streams,
     * and each stream's capture fence). */
    /* Beyond those, a stream may keep state of its own once it captured (a
     * capture fence): the count may grow in an input where a fixed stream
     * captured for the first time, and must not grow otherwise. */
    const cpool_device *d = cpool__handle_object(dev, CPOOL__HANDLE_DEVICE);
    if (!d) fail("the harness's device handle is dead");
    int refs = atomic_load(&d->refs);
    int allowed = (dev_refs_prev < 0 ? 1 + NFIXED : dev_refs_prev) + first_captures;
    if (refs > allowed || refs < 1 + NFIXED)
        fail("the device holds %d references after everything was released, expected %d at most (%d first captures "
             "of a fixed stream in this input) and %d at least",
             refs, allowed, first_captures, 1 + NFIXED);
    dev_refs_prev = refs;
    first_captures = 0;
    if (atomic_load(&d->user_refs) != 1)
        fail("the device counts %d callers' opens, the harness holds one", atomic_load(&d->user_refs));
}

static void reset_model(void) {
    memset(P, 0, sizeof P);
    memset(A, 0, sizeof A);
    memset(C, 0, sizeof C);
    for (int x = 0; x < NS; x++) fork_of[x] = -1;
    memset(G, 0, sizeof G);
    npend = 0;
    memset(ring, 0, sizeof ring);
    ring_next = 0;
    ticks = NULL;
    next_uid = 0;
    cap_serial = 0;
    nverify = 0;
    memset(dead_pools, 0, sizeof dead_pools);
    memset(dead_graphs, 0, sizeof dead_graphs);
    memset(dead_streams, 0, sizeof dead_streams);
    ndead_pools = ndead_graphs = ndead_streams = 0;
    memset(E, 0, sizeof E);
    memset(dep_gate, 0, sizeof dep_gate);
    memset(dep_mark, 0, sizeof dep_mark);
    memset(dead_events, 0, sizeof dead_events);
    ndead_events = 0;
    for (int u = 0; u < NUID; u++) {
        atomic_store(&nested_clears[u], 0);
        atomic_store(&drop_refs[u], 0);
    }
    temp_dying = false;
    timed_epoch = 0;
    pthread_mutex_lock(&drop_mu);
    memset(objs, 0, sizeof objs);
    nobj = 0;
    memset(next_serial, 0, sizeof next_serial);
    memset(last_dropped, 0, sizeof last_dropped);
    pthread_mutex_unlock(&drop_mu);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *t = getenv("FUZZ_API_TRACE");
    trace = t && *t && strcmp(t, "0") != 0;
    const char *x = getenv("FUZZ_API_CROSS_DROPS");
    cross_drops = !x || strcmp(x, "0") != 0;
    main_thread = pthread_self();
    EXPECT_OK(cpool_device_open(CPOOL_BACKEND_HOST, 0, &dev));
    for (int s = 0; s < NFIXED; s++) EXPECT_OK(cpool_stream_create(dev, &S[s]));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dev) LLVMFuzzerInitialize(NULL, NULL);
    if (!pthread_equal(pthread_self(), main_thread)) fail("the harness runs on one thread only");
    reset_model();
    rd r = {data, size};
    while (r.n) step(&r);
    finish();
    return 0;
}
