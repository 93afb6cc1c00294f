/*
 * Streams: a backend stream plus what the library tracks about it (its
 * device registration and unique id, and the capture begun on it).
 */
#include <stddef.h>
#include <stdlib.h>

#include "internal.h"

static cpool__slab stream_slab = CPOOL__SLAB_INIT(cpool_stream);

static cpool_status stream_make(cpool_device *handle, void *native, bool wrap, cpool_stream **out) {
    const char *fn = wrap ? "cpool_stream_wrap" : "cpool_stream_create";
    cpool_device *dev;
    CPOOL__RESOLVE(dev, handle, fn, "device");
    if (!out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    cpool_stream *s = cpool__slab_take(&stream_slab);
    if (!s) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating a stream");
    cpool_status st = dev->be->stream_create(dev->impl, native, wrap, &s->impl);
    if (st != CPOOL_OK) {
        cpool__handle_kill(s);
        cpool__slab_give(&stream_slab, s);
        return st;
    }
    s->dev = cpool__device_retain(dev);
    s->owned = !wrap;
    cpool__device_add_stream(dev, s);
    *out = cpool__handle_of(s);
    return CPOOL_OK;
}

cpool_status cpool_stream_create(cpool_device *dev, cpool_stream **out) { return stream_make(dev, NULL, false, out); }

cpool_status cpool_stream_wrap(cpool_device *dev, void *cuda_stream, cpool_stream **out) {
    return stream_make(dev, cuda_stream, true, out);
}

void *cpool_stream_native(const cpool_stream *handle) {
    const cpool_stream *s = cpool__handle_object(handle);
    if (!s) {
        if (handle) cpool__handle_fail(handle, "cpool_stream_native", "stream");
        return NULL;
    }
    return s->dev->be->stream_native(s->impl);
}

cpool_status cpool_stream_synchronize(cpool_stream *handle) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, "cpool_stream_synchronize", "stream");
    cpool_status st = cpool__refuse_wait_on_stream_thread("cpool_stream_synchronize");
    if (st != CPOOL_OK) return st;
    return s->dev->be->stream_synchronize(s->impl);
}

/* Makes s->capture_fence one that no quiesce holds, so that recording it
 * again is safe: the one the stream has, or a new one (the old goes to
 * *old_out, for release once the lock is dropped). Under streams_mu: a
 * quiesce takes a fence under that lock, so one found unshared here stays
 * unshared until the capture that records it has begun. */
static cpool_status unshared_fence(cpool_stream *s, cpool__shared_event **old_out) {
    cpool__shared_event *f = s->capture_fence;
    if (f && atomic_load(&f->refs) == 1) return CPOOL_OK;
    cpool__shared_event *fresh = NULL;
    cpool_status st = cpool__shared_event_new(s->dev, &fresh);
    if (st != CPOOL_OK) return st;
    *old_out = f;
    s->capture_fence = fresh;
    return CPOOL_OK;
}

cpool_status cpool__stream_begin_capture(cpool_stream *s, cpool_capture_mode mode, cpool__capture *cap) {
    /* Under the device's stream lock: a quiesce or a fence on another thread
     * checks whether a stream captures and records an event on it under
     * that lock, and must not see the capture begin in between. */
    cpool__shared_event *old = NULL;
    cpool__mutex_lock(&s->dev->streams_mu);
    cpool_status st = s->capture ? cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing")
                                 : unshared_fence(s, &old);
    if (st == CPOOL_OK) st = s->dev->be->capture_begin(s->impl, mode, s->capture_fence->event);
    if (st == CPOOL_OK) {
        cpool__capture_move(&s->capture_storage, cap);
        atomic_store_explicit(&s->capture, &s->capture_storage, memory_order_release);
    }
    cpool__mutex_unlock(&s->dev->streams_mu);
    cpool__shared_event_release(old);
    return st;
}

cpool__shared_event *cpool__stream_capture_fence(cpool_stream *s) {
    cpool__mutex_lock(&s->dev->streams_mu);
    cpool__shared_event *f = atomic_load(&s->capture) ? s->capture_fence : NULL;
    if (f) atomic_fetch_add(&f->refs, 1);
    cpool__mutex_unlock(&s->dev->streams_mu);
    return f;
}

/* No lock here, unlike the begin: a quiesce that still sees the capture
 * waits on its fence, which marks all of the stream's work that will have
 * run by the end; one that sees none asks the backend, which still captures
 * or not. The storage is written again only by a begin that saw NULL. */
void cpool__stream_take_capture(cpool_stream *s, cpool__capture *cap) {
    cpool__capture_move(cap, &s->capture_storage);
    atomic_store_explicit(&s->capture, NULL, memory_order_release);
}

/* The stream stays in its device's list until its work has finished, so
 * that a teardown or a fence on another thread meanwhile still sees it and
 * waits for that work: a stream that is gone has no work left. */
static void stream_teardown(cpool_stream *s) {
    cpool__capture_discard(s);
    s->dev->be->stream_synchronize(s->impl);
    cpool__device_remove_stream(s->dev, s);
    cpool__shared_event_release(s->capture_fence);
    s->dev->be->stream_destroy(s->impl);
    cpool_device *dev = s->dev;
    cpool__slab_give(&stream_slab, s);
    cpool__device_release(dev);
}

static void run_deferred_destroy(cpool__deferred *task) {
    stream_teardown((cpool_stream *)((char *)task - offsetof(cpool_stream, deferred_destroy)));
}

void cpool_stream_destroy(cpool_stream *handle) {
    cpool_stream *s;
    CPOOL__RESOLVE_VOID(s, handle, "cpool_stream_destroy", "stream");
    cpool__handle_kill(s); /* dead from now on, also while its work drains */
    if (cpool__on_stream_thread()) {
        /* Inside a callback, perhaps of this very stream: waiting for its
         * work here would wait for itself. */
        s->deferred_destroy.run = run_deferred_destroy;
        cpool__defer(&s->deferred_destroy);
    } else {
        stream_teardown(s);
    }
}

cpool_status cpool_launch_host(cpool_stream *handle, void (*fn)(void *arg), void *arg) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, "cpool_launch_host", "stream");
    if (!fn) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_launch_host: fn is NULL");
    cpool__capture *cap = atomic_load_explicit(&s->capture, memory_order_relaxed); /* the owner's own field */
    if (cap) cap->host_work = true;
    return s->dev->be->launch_host(s->impl, fn, arg);
}

cpool_status cpool_memcpy_async(cpool_stream *handle, void *dst, const void *src, size_t bytes) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, "cpool_memcpy_async", "stream");
    if (bytes == 0) return CPOOL_OK;
    if (!dst || !src) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memcpy_async: NULL pointer");
    return s->dev->be->memcpy_async(s->impl, dst, src, bytes);
}

cpool_status cpool_memset_async(cpool_stream *handle, void *dst, int value, size_t bytes) {
    cpool_stream *s;
    CPOOL__RESOLVE(s, handle, "cpool_memset_async", "stream");
    if (bytes == 0) return CPOOL_OK;
    if (!dst) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memset_async: NULL pointer");
    return s->dev->be->memset_async(s->impl, dst, value, bytes);
}
