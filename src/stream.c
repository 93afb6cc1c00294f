/*
 * Streams: a backend stream plus what the library tracks about it (its
 * device registration and unique id, and the capture begun on it).
 */
#include <stdlib.h>

#include "internal.h"

static cpool_status stream_make(cpool_device *dev, void *native, bool wrap, cpool_stream **out) {
    if (!dev || !out) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_stream_%s: NULL argument", wrap ? "wrap" : "create");
    cpool_stream *s = cpool__calloc(1, sizeof *s);
    if (!s) return cpool__fail(CPOOL_ERR_OUT_OF_MEMORY, "out of host memory creating a stream");
    cpool_status st = dev->be->stream_create(dev->impl, native, wrap, &s->impl);
    if (st != CPOOL_OK) {
        free(s);
        return st;
    }
    s->dev = cpool__device_retain(dev);
    s->owned = !wrap;
    cpool__device_add_stream(dev, s);
    *out = s;
    return CPOOL_OK;
}

cpool_status cpool_stream_create(cpool_device *dev, cpool_stream **out) { return stream_make(dev, NULL, false, out); }

cpool_status cpool_stream_wrap(cpool_device *dev, void *cuda_stream, cpool_stream **out) {
    return stream_make(dev, cuda_stream, true, out);
}

void *cpool_stream_native(const cpool_stream *s) { return s ? s->dev->be->stream_native(s->impl) : NULL; }

cpool_status cpool_stream_synchronize(cpool_stream *s) {
    if (!s) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_stream_synchronize: stream is NULL");
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
    pthread_mutex_lock(&s->dev->streams_mu);
    cpool_status st = s->capture ? cpool__fail(CPOOL_ERR_ALREADY_CAPTURING, "the stream is already capturing")
                                 : unshared_fence(s, &old);
    if (st == CPOOL_OK) st = s->dev->be->capture_begin(s->impl, mode, s->capture_fence->event);
    if (st == CPOOL_OK) {
        cpool__capture_move(&s->capture_storage, cap);
        atomic_store_explicit(&s->capture, &s->capture_storage, memory_order_release);
    }
    pthread_mutex_unlock(&s->dev->streams_mu);
    cpool__shared_event_release(old);
    return st;
}

/* No lock here, unlike the begin: a quiesce that still sees the capture
 * waits on its fence, which marks all of the stream's work that will have
 * run by the end; one that sees none asks the backend, which still captures
 * or not. The storage is written again only by a begin that saw NULL. */
void cpool__stream_take_capture(cpool_stream *s, cpool__capture *cap) {
    cpool__capture_move(cap, &s->capture_storage);
    atomic_store_explicit(&s->capture, NULL, memory_order_release);
}

void cpool_stream_destroy(cpool_stream *s) {
    if (!s) return;
    cpool__capture_discard(s);
    cpool__device_remove_stream(s->dev, s);
    cpool__shared_event_release(s->capture_fence);
    s->dev->be->stream_destroy(s->impl);
    cpool__device_release(s->dev);
    free(s);
}

cpool_status cpool_launch_host(cpool_stream *s, void (*fn)(void *arg), void *arg) {
    if (!s || !fn) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_launch_host: %s is NULL", s ? "fn" : "stream");
    return s->dev->be->launch_host(s->impl, fn, arg);
}

cpool_status cpool_memcpy_async(cpool_stream *s, void *dst, const void *src, size_t bytes) {
    if (!s) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memcpy_async: stream is NULL");
    if (bytes == 0) return CPOOL_OK;
    if (!dst || !src) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memcpy_async: NULL pointer");
    return s->dev->be->memcpy_async(s->impl, dst, src, bytes);
}

cpool_status cpool_memset_async(cpool_stream *s, void *dst, int value, size_t bytes) {
    if (!s) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memset_async: stream is NULL");
    if (bytes == 0) return CPOOL_OK;
    if (!dst) return cpool__fail(CPOOL_ERR_INVALID_ARGUMENT, "cpool_memset_async: NULL pointer");
    return s->dev->be->memset_async(s->impl, dst, value, bytes);
}
