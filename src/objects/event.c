/*
 * Events: a user's marks in stream order, CUDA events on the CUDA backend and
 * queue positions on the host backend. An event holds its device; its
 * backend event is timed, so two completed records give elapsed time.
 *
 * In a capture (CUDA's rules on both backends): a record on a stream taking
 * part in a capture marks its captured work; a stream outside any capture
 * that waits for it joins the capture (a fork, stream.c), and one inside it
 * depends on that work (a join), which also hands the blocks the recording
 * branch freed before the record to the waiting one (pool.c). The event
 * remembers which capture its last record was in, and on which stream,
 * with the allocators' free clock at the record.
 */
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"
#include "stream_order.h"

struct cpool_event {
    cpool__handle_header handle;
    cpool_device *dev;
    cpool__bevent *impl;
    cpool__deferred deferred_destroy; /* a destroy from a stream callback */
    /* Serialises records and waits: a wait's choice (a fork, a join, a
     * plain wait) and the backend's wait see the same last record. */
    cpool__mutex mu;
    /* The last record: whether there was one; made outside capture, the
     * recording stream and the free clock then, packed in one word
     * (stream_order.h, cpool__deps_pack: a wait lets the waiting stream
     * reuse the blocks freed there before; 0 for a record made in a
     * capture); made in a capture, that capture's id (0: none), the
     * recording stream's handle and the free clock. Written under mu; atomics, as queries read them
     * without it. */
    atomic_bool recorded;
    _Atomic uint64_t eager_mark;
    _Atomic uint64_t capture_id;
    _Atomic(cpool_stream *) recorder;
    _Atomic uint64_t free_mark;
};

static cpool__slab event_slab = CPOOL__SLAB_INIT(cpool_event, CPOOL__HANDLE_EVENT);

/* Not a status: an eager record or wait the backend refused because a
 * capture began on the stream meanwhile, made again (at most this many
 * times) by the path the stream's state then asks for. */
#define CPOOL__AGAIN ((cpool_status)-1)
enum { RACING_CAPTURE_TURNS = 100 };

cpool_status cpool_event_create(cpool_device *dev_handle, cpool_event **out) {
    cpool_device *dev;
    CPOOL__RESOLVE_OPEN_DEVICE(dev, dev_handle, "cpool_event_create");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_create: out is NULL");
    cpool_status st = cpool__deferred_start();
    if (st != CPOOL_OK) return cpool__fail_in("cpool_event_create", st);
    cpool_event *e = cpool__slab_take(&event_slab);
    if (!e) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "cpool_event_create: out of host memory");
    st = dev->be->event_create_timed(dev->impl, &e->impl);
    if (st != CPOOL_OK) {
        cpool__handle_kill(e);
        cpool__slab_give(&event_slab, e);
        return cpool__fail_in("cpool_event_create", st);
    }
    e->dev = cpool__device_retain(dev);
    cpool__mutex_init(&e->mu, CPOOL__RANK_EVENT);
    atomic_init(&e->recorded, false);
    atomic_init(&e->eager_mark, 0);
    atomic_init(&e->capture_id, 0);
    atomic_init(&e->recorder, NULL);
    atomic_init(&e->free_mark, 0);
    *out = cpool__handle_of(e);
    return CPOOL_OK;
}

static void event_teardown(cpool_event *e) {
    e->dev->be->event_destroy(e->impl); /* a pending record completes on its own */
    cpool__mutex_destroy(&e->mu);
    cpool_device *dev = e->dev;
    cpool__slab_give(&event_slab, e);
    cpool__device_release(dev);
}

static void run_deferred_destroy(cpool__deferred *task) {
    event_teardown((cpool_event *)((char *)task - offsetof(cpool_event, deferred_destroy)));
}

void cpool_event_destroy(cpool_event *handle) {
    cpool_event *e = cpool__handle_end(handle, CPOOL__HANDLE_EVENT); /* of two racing destroys, one ends it */
    if (!e) {
        if (handle) cpool__handle_fail(handle, CPOOL__HANDLE_EVENT, "cpool_event_destroy", "event");
        return;
    }
    if (cpool__on_stream_thread()) { /* CUDA refuses CUDA calls there */
        e->deferred_destroy.run = run_deferred_destroy;
        cpool__defer(&e->deferred_destroy);
    } else {
        event_teardown(e);
    }
}

/* Resolves an event and a stream of one device for `fn`. */
static cpool_status event_and_stream(const char *fn, cpool_event *e_handle, cpool_stream *s_handle, cpool_event **e,
                                     cpool_stream **s) {
    CPOOL__RESOLVE(*e, e_handle, CPOOL__HANDLE_EVENT, fn, "event");
    CPOOL__RESOLVE(*s, s_handle, CPOOL__HANDLE_STREAM, fn, "stream");
    if ((*e)->dev != (*s)->dev) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the event is of another device", fn);
    return CPOOL_OK;
}

/* A record on s, a stream that takes part in a capture (e->mu held): the
 * event remembers where. CPOOL__AGAIN if the capture ended meanwhile. */
static __attribute__((noinline)) cpool_status record_in_capture(cpool_event *e, cpool_stream *s,
                                                                cpool_stream *s_handle) {
    cpool__capture *cap = cpool__capture_lock(s);
    if (!cap) return CPOOL__AGAIN; /* it ended meanwhile: an eager record */
    cpool_status st = e->dev->be->user_event_record(e->impl, s->impl);
    if (st == CPOOL_OK) {
        /* Release stores, capture_id after the fields a wait reads once it
         * has acquired it: a fence instruction each would cost more than a
         * capture's own bookkeeping. */
        atomic_store_explicit(&e->recorder, s_handle, memory_order_release);
        atomic_store_explicit(&e->free_mark, cpool__free_clock_tick(), memory_order_release);
        if (atomic_load_explicit(&e->eager_mark, memory_order_relaxed))
            atomic_store(&e->eager_mark, 0); /* a captured record orders no eager work */
        atomic_store_explicit(&e->capture_id, cap->id, memory_order_release);
        if (!atomic_load_explicit(&e->recorded, memory_order_relaxed)) atomic_store(&e->recorded, true);
        /* A stream may fork from this record: work after it on s may run
         * beside that branch, so frees from now on go by branch. */
        cpool__capture_note_event(cap);
    }
    cpool__capture_unlock(cap);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_event_record", st);
}

/* A record outside capture (e->mu held). */
static cpool_status record_eager(cpool_event *e, cpool_stream *s) {
    /* The clock first: a free it does not count may not be before the
     * record. (No wait comes in between: e->mu.) */
    uint64_t mark = cpool__deps_pack(cpool__stream_id(s), cpool__free_clock_tick());
    cpool_status st = e->dev->be->user_event_record(e->impl, s->impl);
    if (st == CPOOL_ERR_UNSUPPORTED) return CPOOL__AGAIN; /* see in_turns */
    if (st != CPOOL_OK) return cpool__fail_in("cpool_event_record", st);
    atomic_store(&e->eager_mark, mark);
    if (atomic_load_explicit(&e->capture_id, memory_order_relaxed)) atomic_store(&e->capture_id, 0);
    if (!atomic_load_explicit(&e->recorded, memory_order_relaxed)) atomic_store(&e->recorded, true);
    return CPOOL_OK;
}

/* Runs `step` (a record or a wait) under e's lock. CPOOL__AGAIN: the
 * backend refused eager work on s, which a capture begun on s by another
 * thread meanwhile (and perhaps ended already) explains: the step goes
 * again, by the path s's state then asks for, and a success leaves the
 * last error as it was. After RACING_CAPTURE_TURNS refusals the backend's
 * reason stands (a capture begun outside the library). */
static cpool_status in_turns(const char *fn, cpool_event *e, cpool_stream *s, cpool_stream *s_handle,
                             cpool_status (*step)(cpool_event *, cpool_stream *, cpool_stream *)) {
    cpool__error_mark before;
    cpool__error_save(&before);
    cpool__mutex_lock(&e->mu);
    cpool_status st;
    int turns = 0;
    do st = step(e, s, s_handle);
    while (st == CPOOL__AGAIN && ++turns < RACING_CAPTURE_TURNS);
    cpool__mutex_unlock(&e->mu);
    if (st == CPOOL__AGAIN) return cpool__fail_in(fn, CPOOL_ERR_UNSUPPORTED);
    if (st == CPOOL_OK && turns) cpool__error_restore(&before);
    return st;
}

static cpool_status record_step(cpool_event *e, cpool_stream *s, cpool_stream *s_handle) {
    return cpool__stream_capture(s) ? record_in_capture(e, s, s_handle) : record_eager(e, s);
}

cpool_status cpool_event_record(cpool_event *e_handle, cpool_stream *s_handle) {
    cpool_event *e = NULL;
    cpool_stream *s = NULL; /* set when st is CPOOL_OK (gcc cannot tell) */
    cpool_status st = event_and_stream("cpool_event_record", e_handle, s_handle, &e, &s);
    if (st != CPOOL_OK) return st;
    return in_turns("cpool_event_record", e, s, s_handle, record_step);
}

/* A wait where a capture is involved (e->mu held): the event's last record
 * was made in capture `capture_id`, or s takes part in one. */
static __attribute__((noinline)) cpool_status wait_in_capture(cpool_stream *s, cpool_event *e, uint64_t capture_id) {
    const char *fn = "cpool_stream_wait_event";
    if (!capture_id) {
        if (!atomic_load(&e->recorded)) return CPOOL_OK; /* nothing to wait for */
        if (!cpool__stream_capture(s)) return CPOOL__AGAIN; /* its capture ended meanwhile */
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                           "%s: the stream takes part in a capture, and the event was last recorded outside it: a "
                           "capture waits only for events recorded in it",
                           fn);
    }
    cpool_stream *recorder =
        cpool__handle_object(atomic_load_explicit(&e->recorder, memory_order_acquire), CPOOL__HANDLE_STREAM);
    cpool__capture *cap = recorder ? cpool__capture_lock(recorder) : NULL;
    if (!cap || cap->id != capture_id) {
        if (cap) cpool__capture_unlock(cap);
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the event was recorded in a capture that has ended", fn);
    }
    cpool__capture *mine = cpool__stream_capture(s);
    cpool_status st;
    if (!mine) {
        st = cpool__capture_fork(s, cap, e->impl);
    } else if (mine != cap) {
        st = cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the event was recorded in another capture than the stream's", fn);
    } else {
        st = s->dev->be->stream_wait_event(s->impl, e->impl);
        if (st == CPOOL_OK && cap->branching && recorder != s)
            cpool__capture_join_branch(cap, cpool__key_branch(cpool__stream_id(recorder)),
                                       atomic_load(&e->free_mark), cpool__key_branch(cpool__stream_id(s)));
    }
    cpool__capture_unlock(cap);
    return st == CPOOL_OK ? st : cpool__fail_in(fn, st);
}

/* A wait, e->mu held: no record of e comes in between. */
static cpool_status wait_step(cpool_event *e, cpool_stream *s, cpool_stream *s_handle) {
    CPOOL_UNUSED(s_handle);
    uint64_t capture_id = atomic_load_explicit(&e->capture_id, memory_order_acquire);
    if (capture_id || cpool__stream_capture(s)) return wait_in_capture(s, e, capture_id);
    uint64_t mark = atomic_load(&e->eager_mark);
    cpool_status st = e->dev->be->stream_wait_event(s->impl, e->impl);
    if (st == CPOOL_ERR_UNSUPPORTED) return CPOOL__AGAIN; /* see in_turns */
    if (st != CPOOL_OK) return cpool__fail_in("cpool_stream_wait_event", st);
    /* Reuse follows the event: what the recording stream freed before the
     * record is the waiting stream's to reuse now. */
    if (mark) cpool__deps_note(&s->order.deps, mark);
    return CPOOL_OK;
}

cpool_status cpool_stream_wait_event(cpool_stream *s_handle, cpool_event *e_handle) {
    cpool_event *e = NULL;
    cpool_stream *s = NULL; /* set when st is CPOOL_OK (gcc cannot tell) */
    cpool_status st = event_and_stream("cpool_stream_wait_event", e_handle, s_handle, &e, &s);
    if (st != CPOOL_OK) return st;
    return in_turns("cpool_stream_wait_event", e, s, s_handle, wait_step);
}

/* An event whose last record was made in a capture marks a place in a
 * graph, not stream work: nothing to query, wait for or time. */
static cpool_status refuse_captured(const cpool_event *e, const char *fn) {
    if (!atomic_load(&e->capture_id)) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT,
                       "%s: the event was last recorded in a capture: it marks a place in a graph, not stream work", fn);
}

cpool_status cpool_event_query(cpool_event *handle) {
    cpool_event *e;
    CPOOL__RESOLVE(e, handle, CPOOL__HANDLE_EVENT, "cpool_event_query", "event");
    cpool_status st = refuse_captured(e, "cpool_event_query");
    if (st != CPOOL_OK) return st;
    if (e->dev->be->event_done(e->impl)) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_NOT_READY, "cpool_event_query: the work before the record has not finished");
}

cpool_status cpool_event_synchronize(cpool_event *handle) {
    cpool_event *e;
    CPOOL__RESOLVE(e, handle, CPOOL__HANDLE_EVENT, "cpool_event_synchronize", "event");
    cpool_status st = refuse_captured(e, "cpool_event_synchronize");
    if (st == CPOOL_OK) st = cpool__refuse_wait_on_stream_thread("cpool_event_synchronize");
    if (st != CPOOL_OK) return st;
    st = e->dev->be->event_synchronize(e->impl);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_event_synchronize", st);
}

cpool_status cpool_event_elapsed_ms(cpool_event *start_handle, cpool_event *end_handle, float *ms_out) {
    cpool_event *start, *end;
    CPOOL__RESOLVE(start, start_handle, CPOOL__HANDLE_EVENT, "cpool_event_elapsed_ms", "start event");
    CPOOL__RESOLVE(end, end_handle, CPOOL__HANDLE_EVENT, "cpool_event_elapsed_ms", "end event");
    if (!ms_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: ms_out is NULL");
    if (start->dev != end->dev)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: the events are of two devices");
    cpool_status st = refuse_captured(start, "cpool_event_elapsed_ms");
    if (st == CPOOL_OK) st = refuse_captured(end, "cpool_event_elapsed_ms");
    if (st != CPOOL_OK) return st;
    st = start->dev->be->event_elapsed_ms(start->impl, end->impl, ms_out);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_event_elapsed_ms", st);
}
