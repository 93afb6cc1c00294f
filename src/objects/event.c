/*
 * Events: a user's marks in stream order, CUDA events on the CUDA backend and
 * queue positions on the host backend. An event holds its device; its
 * backend event is timed, so two completed records give elapsed time.
 *
 * Not yet in a capture: recording an event on a capturing stream, or
 * waiting for one there (CUDA's fork and join of a multi-stream capture),
 * is refused with CPOOL_ERR_UNSUPPORTED, rather than leave streams
 * capturing that the pools would not know to serve as captured.
 */
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"

struct cpool_event {
    cpool__handle_header handle;
    cpool_device *dev;
    cpool__bevent *impl;
    cpool__deferred deferred_destroy; /* a destroy from a stream callback */
};

static cpool__slab event_slab = CPOOL__SLAB_INIT(cpool_event);

cpool_status cpool_event_create(cpool_device *dev_handle, cpool_event **out) {
    cpool_device *dev;
    CPOOL__RESOLVE(dev, dev_handle, "cpool_event_create", "device");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_create: out is NULL");
    cpool_status st = cpool__deferred_start();
    if (st != CPOOL_OK) return st;
    cpool_event *e = cpool__slab_take(&event_slab);
    if (!e) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating an event");
    st = dev->be->event_create_timed(dev->impl, &e->impl);
    if (st != CPOOL_OK) {
        cpool__handle_kill(e);
        cpool__slab_give(&event_slab, e);
        return cpool__fail_in("cpool_event_create", st);
    }
    e->dev = cpool__device_retain(dev);
    *out = cpool__handle_of(e);
    return CPOOL_OK;
}

static void event_teardown(cpool_event *e) {
    e->dev->be->event_destroy(e->impl); /* a pending record completes on its own */
    cpool_device *dev = e->dev;
    cpool__slab_give(&event_slab, e);
    cpool__device_release(dev);
}

static void run_deferred_destroy(cpool__deferred *task) {
    event_teardown((cpool_event *)((char *)task - offsetof(cpool_event, deferred_destroy)));
}

void cpool_event_destroy(cpool_event *handle) {
    cpool_event *e = cpool__handle_end(handle); /* of two racing destroys, one ends it */
    if (!e) {
        if (handle) cpool__handle_fail(handle, "cpool_event_destroy", "event");
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
    CPOOL__RESOLVE(*e, e_handle, fn, "event");
    CPOOL__RESOLVE(*s, s_handle, fn, "stream");
    if ((*e)->dev != (*s)->dev) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: the event is of another device", fn);
    if (cpool__stream_captures(*s))
        return cpool__fail(CPOOL_ERR_UNSUPPORTED, "%s: events in a capture (a multi-stream capture) are not supported", fn);
    return CPOOL_OK;
}

cpool_status cpool_event_record(cpool_event *e_handle, cpool_stream *s_handle) {
    cpool_event *e;
    cpool_stream *s;
    cpool_status st = event_and_stream("cpool_event_record", e_handle, s_handle, &e, &s);
    if (st != CPOOL_OK) return st;
    st = e->dev->be->event_record(e->impl, s->impl);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_event_record", st);
}

cpool_status cpool_stream_wait_event(cpool_stream *s_handle, cpool_event *e_handle) {
    cpool_event *e;
    cpool_stream *s;
    cpool_status st = event_and_stream("cpool_stream_wait_event", e_handle, s_handle, &e, &s);
    if (st != CPOOL_OK) return st;
    st = e->dev->be->stream_wait_event(s->impl, e->impl);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_stream_wait_event", st);
}

cpool_status cpool_event_query(cpool_event *handle) {
    cpool_event *e;
    CPOOL__RESOLVE(e, handle, "cpool_event_query", "event");
    if (e->dev->be->event_done(e->impl)) return CPOOL_OK;
    return cpool__fail(CPOOL_ERR_NOT_READY, "cpool_event_query: the work before the record has not finished");
}

cpool_status cpool_event_synchronize(cpool_event *handle) {
    cpool_event *e;
    CPOOL__RESOLVE(e, handle, "cpool_event_synchronize", "event");
    cpool_status st = cpool__refuse_wait_on_stream_thread("cpool_event_synchronize");
    if (st != CPOOL_OK) return st;
    st = e->dev->be->event_synchronize(e->impl);
    return st == CPOOL_OK ? st : cpool__fail_in("cpool_event_synchronize", st);
}

cpool_status cpool_event_elapsed_ms(cpool_event *start_handle, cpool_event *end_handle, float *ms_out) {
    cpool_event *start, *end;
    CPOOL__RESOLVE(start, start_handle, "cpool_event_elapsed_ms", "start event");
    CPOOL__RESOLVE(end, end_handle, "cpool_event_elapsed_ms", "end event");
    if (!ms_out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: ms_out is NULL");
    if (start->dev != end->dev)
        return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_event_elapsed_ms: the events are of two devices");
    return start->dev->be->event_elapsed_ms(start->impl, end->impl, ms_out);
}
